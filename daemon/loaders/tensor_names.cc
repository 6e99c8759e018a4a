#include "daemon/loaders/tensor_names.h"

#include <fmt/format.h>

#include "common/name_glob.h"

#include "daemon/loaders/tensor_slots.h"

namespace niels::daemon::loaders {

std::vector<NamedTensor> NamedTensors(const model::Weights& weights) {
  std::vector<NamedTensor> named;
  weights.ForEach([&](const std::string& ours, const model::Tensor& tensor) {
    NamedTensor t{ours, FileName(ours, TensorNaming::kHuggingFace), FileName(ours, TensorNaming::kGguf), tensor};
    // Neither format stores it: the one name it has elsewhere, for both.
    const std::string fallback = t.gguf.empty() ? FileName(ours, TensorNaming::kNiels) : t.gguf;
    if (t.hf.empty()) t.hf = fallback;
    if (t.gguf.empty()) t.gguf = fallback;
    if (t.hf.empty()) t.hf = t.gguf = ours;  // no slot without a name in the table; kept visible regardless
    named.push_back(std::move(t));
  });
  return named;
}

common::StatusOr<std::vector<size_t>> SelectTensors(const std::vector<NamedTensor>& tensors,
                                                    const std::vector<std::string>& patterns,
                                                    std::string_view field) {
  std::vector<bool> selected(tensors.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    bool any = false;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (common::NameGlobMatches(patterns[i], tensors[t].hf) ||
          common::NameGlobMatches(patterns[i], tensors[t].gguf)) {
        selected[t] = true;
        any = true;
      }
    }
    if (!any) {
      return common::Status::InvalidArgument(fmt::format(
          "{}[{}]: '{}' names no tensor of this model (use Hugging Face names such as "
          "model.layers.0.mlp.gate_proj.weight or GGUF names such as blk.0.ffn_gate.weight; * matches any run "
          "of characters)",
          field, i, patterns[i]));
    }
  }
  std::vector<size_t> indices;
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (selected[t]) indices.push_back(t);
  }
  return indices;
}

}  // namespace niels::daemon::loaders
