#include "daemon/model/language_model.h"

#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

namespace niels::daemon::model {

torch::Tensor LanguageModel::Step(std::span<const SequenceInput> inputs, int64_t /*trace_layer*/) const {
  c10::InferenceMode guard;
  std::vector<torch::Tensor> rows;
  for (const SequenceInput& input : inputs) {
    torch::Tensor logits = Prefill(input.tokens, *input.cache, input.all_logits);
    if (input.all_logits) {
      rows.push_back(logits);
    } else if (input.want_logits) {
      rows.push_back(logits.reshape({1, -1}));
    }
  }
  if (rows.empty()) return at::empty({0, config().vocab_size}, at::kFloat);
  return at::cat(rows);
}

}  // namespace niels::daemon::model
