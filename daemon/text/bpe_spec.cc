#include "daemon/text/bpe_spec.h"

#include <fmt/format.h>

namespace niels::daemon::text {

std::optional<TokenType> TokenTypeFromGguf(int32_t value) {
  if (value < static_cast<int32_t>(TokenType::kNormal) || value > static_cast<int32_t>(TokenType::kByte)) {
    return std::nullopt;
  }
  return static_cast<TokenType>(value);
}

common::StatusOr<std::pair<std::string, std::string>> SplitMergeLine(std::string_view line, size_t index) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
    return common::Status::InvalidArgument(
        fmt::format("merge {}: \"{}\" is not two pieces separated by one space", index, line));
  }
  return std::make_pair(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
}

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
