#include "daemon/text/bpe_spec.h"

#include <fmt/format.h>

namespace niels::daemon::text {

common::StatusOr<PreTokenizerSetup> PreTokenizerForGgufName(std::string_view name) {
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    return PreTokenizerSetup{{std::string(kLlama3SplitPattern)}, Normalization::kNone};
  }
  if (name == "qwen2") {
    return PreTokenizerSetup{{std::string(kQwen2SplitPattern)}, Normalization::kNfc};
  }
  return common::Status::Unimplemented(
      fmt::format("tokenizer.ggml.pre \"{}\" is not supported (known: llama-bpe, llama3, llama-v3, qwen2)",
                  name));
}

}  // namespace niels::daemon::text
