#include "daemon/loaders/tensor_names.h"

#include <fmt/format.h>

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

bool GlobMatches(std::string_view pattern, std::string_view name) {
  // Greedy with one backtrack point: the last `*` seen and where its match ends.
  size_t p = 0, n = 0;
  size_t star = std::string_view::npos, star_end = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_end = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++star_end;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

common::StatusOr<std::vector<size_t>> SelectTensors(const std::vector<NamedTensor>& tensors,
                                                    const std::vector<std::string>& patterns,
                                                    std::string_view field) {
  std::vector<bool> selected(tensors.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    bool any = false;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (GlobMatches(patterns[i], tensors[t].hf) || GlobMatches(patterns[i], tensors[t].gguf)) {
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
