#include "daemon/model/language_model.h"

#include <vector>

namespace niels::daemon::model {

std::vector<float> LanguageModel::Step(std::span<const SequenceInput> inputs, int64_t /*trace_layer*/) const {
  const int64_t V = config().vocab_size;
  std::vector<float> rows;
  for (const SequenceInput& input : inputs) {
    std::vector<float> logits = Prefill(input.tokens, *input.cache, input.all_logits);
    if (input.all_logits || input.want_logits) {
      // Prefill returns the last row [V] unless all_logits.
      rows.insert(rows.end(), logits.begin(), input.all_logits ? logits.end() : logits.begin() + V);
    }
  }
  return rows;
}

}  // namespace niels::daemon::model
