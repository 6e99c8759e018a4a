// WeightStats: the statistics of the tensors a request names (proto/PROTOCOL.md, "Weight
// statistics"), on the compile worker. The names are checked against their budgets, matched against
// the model's tensors (loaders/tensor_names.h), the selection is bounded, and each tensor's
// statistics come from the cache or are computed one tensor at a time (model/tensor_statistics.h).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/budgets.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/probes.h"
#include "daemon/kernels/dtype.h"
#include "daemon/loaders/tensor_names.h"
#include "daemon/model/tensor_statistics.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

namespace {

constexpr std::string_view kField = "weight_stats.names";

Status CheckNames(const v1::WeightStatsRequest& request) {
  if (request.names_size() == 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: name at least one tensor (e.g. model.layers.0.mlp.gate_proj.weight, or * for all)", kField));
  }
  if (static_cast<size_t>(request.names_size()) > common::kWeightStatsNamesLimit) {
    return common::Refuse(common::BudgetId::kWeightStatsNames,
                          fmt::format("{}: {} names (the limit is {})", kField, request.names_size(),
                                      common::kWeightStatsNamesLimit));
  }
  for (int i = 0; i < request.names_size(); ++i) {
    if (request.names(i).size() > common::kWeightStatsNameBytesLimit) {
      return common::Refuse(common::BudgetId::kWeightStatsNameBytes,
                            fmt::format("{}[{}]: {} bytes (the limit is {})", kField, i, request.names(i).size(),
                                        common::kWeightStatsNameBytesLimit));
    }
  }
  return Status::Ok();
}

void ToProto(const loaders::NamedTensor& named, const model::TensorStatistics& s, bool full, v1::TensorStats& out) {
  out.set_hf_name(named.hf);
  out.set_gguf_name(named.gguf);
  for (int64_t dim : named.tensor.shape) out.add_shape(dim);
  out.set_dtype(std::string(kernels::DtypeName(named.tensor.dtype)));
  out.set_parameters(static_cast<uint64_t>(named.tensor.numel()));
  StatisticsToProto(s, full, out);
}

}  // namespace

Status CheckWeightStatsSelection(uint64_t tensors, uint64_t elements) {
  if (tensors > common::kWeightStatsTensorsLimit) {
    return common::Refuse(common::BudgetId::kWeightStatsTensors,
                          fmt::format("{}: the names match {} tensors (the limit is {}); ask in parts", kField,
                                      tensors, common::kWeightStatsTensorsLimit));
  }
  if (elements > common::kWeightStatsElementsLimit) {
    return common::Refuse(common::BudgetId::kWeightStatsElements,
                          fmt::format("{}: the names match tensors of {} elements in all (the limit is {}); ask in "
                                      "parts",
                                      kField, elements, common::kWeightStatsElementsLimit));
  }
  return Status::Ok();
}

HandlerResult HandleWeightStats(const BackgroundContext& context, const v1::WeightStatsRequest& request,
                                const CompileCancelled& cancelled) {
  NIELS_RETURN_IF_ERROR(CheckNames(request));
  const loaders::Model& model = *context.model;
  const std::vector<loaders::NamedTensor> tensors = loaders::NamedTensors(model.transformer->weights());
  const std::vector<std::string> patterns(request.names().begin(), request.names().end());
  common::StatusOr<std::vector<size_t>> selected = loaders::SelectTensors(tensors, patterns, kField);
  if (!selected.ok()) return selected.status();
  uint64_t elements = 0;
  for (size_t index : *selected) elements += static_cast<uint64_t>(tensors[index].tensor.numel());
  NIELS_RETURN_IF_ERROR(CheckWeightStatsSelection(selected->size(), elements));
  // A file rewritten in place under the mapping would show other values (or SIGBUS where truncated).
  if (model.weights_file != nullptr) NIELS_RETURN_IF_ERROR(model.weights_file->CheckUnchanged());
  const bool full = request.full();
  v1::Response response;
  v1::WeightStatsResponse& out = *response.mutable_weight_stats();
  for (size_t index : *selected) {
    const loaders::NamedTensor& named = tensors[index];
    std::optional<model::TensorStatistics> statistics = context.weight_stats_cache->Find(named.ours, full);
    if (!statistics) {
      common::StatusOr<model::TensorStatistics> computed =
          model::ComputeTensorStatistics(named.tensor, full, cancelled);
      if (!computed.ok()) return computed.status();
      context.weight_stats_cache->Insert(named.ours, *computed);
      statistics = std::move(computed).value();
    }
    ToProto(named, *statistics, full, *out.add_tensors());
  }
  return response;
}

}  // namespace niels::daemon::handlers
