#pragma once
// Helpers the tokenizer file readers share: error messages that name the file and the key path,
// the line and column of a JSON syntax error, and looking a piece up in a BpeSpec.

#include <cstdint>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "common/status.h"
#include "daemon/text/bpe_spec.h"

namespace niels::daemon::text {

// Error messages of one file: "<source>: <path>: <what>".
class JsonErrors {
 public:
  explicit JsonErrors(std::string_view source) : source_(source) {}
  // INVALID_ARGUMENT: a malformed or mistyped value.
  common::Status Invalid(std::string_view path, std::string_view what) const {
    return common::Status::InvalidArgument(fmt::format("{}: {}: {}", source_, path, what));
  }
  // UNIMPLEMENTED: a valid value nielsd does not support.
  common::Status Unsupported(std::string_view path, std::string_view what) const {
    return common::Status::Unimplemented(fmt::format("{}: {}: {} is not supported", source_, path, what));
  }

 private:
  std::string_view source_;
};

// INVALID_ARGUMENT for text that is not JSON: "<source>: JSON syntax error at byte B (line L,
// column C): <detail>", the position found with nlohmann-json's SAX parser (iterative: deep
// nesting costs no recursion); "<source>: not usable JSON: <detail>" when the text is JSON that a
// parser refused for other reasons (simdjson's depth or number limits).
common::Status JsonSyntaxError(std::string_view json, std::string_view source, std::string_view detail);

// The lowest id whose piece is `piece` (unused ids excluded). Linear: for a few lookups at load.
std::optional<int32_t> FindPieceId(const BpeSpec& spec, std::string_view piece);

}  // namespace niels::daemon::text
