#include "tools/inspect/weight_stats_report.h"

#include <fmt/format.h>

#include "daemon/kernels/dtype.h"
#include "daemon/loaders/tensor_names.h"
#include "daemon/model/tensor_statistics.h"

namespace niels::tools {

namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

common::Status PrintWeightStats(const daemon::loaders::Model& model, const std::vector<std::string>& patterns,
                                bool full, std::ostream& out) {
  namespace loaders = daemon::loaders;
  const std::vector<loaders::NamedTensor> tensors = loaders::NamedTensors(model.transformer->weights());
  common::StatusOr<std::vector<size_t>> selected = loaders::SelectTensors(tensors, patterns, "--weight-stats");
  if (!selected.ok()) return selected.status();
  for (size_t index : *selected) {
    const loaders::NamedTensor& t = tensors[index];
    common::StatusOr<daemon::model::TensorStatistics> computed = daemon::model::ComputeTensorStatistics(t.tensor, full);
    if (!computed.ok()) return computed.status();
    const daemon::model::TensorStatistics& s = *computed;
    out << fmt::format("{} ({}) {} {} {} parameters", t.hf, t.gguf, Shape(t.tensor.shape),
                       daemon::kernels::DtypeName(t.tensor.dtype), t.tensor.numel());
    if (s.nonfinite > 0) out << fmt::format(", {} not finite (left out)", s.nonfinite);
    out << fmt::format("\n  mean={:.9g} std={:.9g} min={:.9g} max={:.9g} l2_norm={:.9g}\n", s.mean, s.std, s.min,
                       s.max, s.l2_norm);
    if (!full) continue;
    out << fmt::format(
        "  median={:.9g} abs_mean={:.9g} zeros_percent={:.9g} near_zero_percent={:.9g} l1_norm={:.9g} p5={:.9g} "
        "p25={:.9g} p50={:.9g} p75={:.9g} p95={:.9g}\n",
        s.median, s.abs_mean, s.zeros_percent, s.near_zero_percent, s.l1_norm, s.percentiles[0], s.percentiles[1],
        s.percentiles[2], s.percentiles[3], s.percentiles[4]);
    out << fmt::format("  histogram [{:.9g}, {:.9g}]:", s.histogram_low, s.histogram_high);
    for (int64_t count : s.histogram) out << " " << count;
    out << "\n";
  }
  return common::Status::Ok();
}

}  // namespace niels::tools
