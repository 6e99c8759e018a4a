// Fuzz target: tokenizer_config.json reading (daemon/text/tokenizer_config.h,
// ApplyTokenizerConfigJson) into a fixed vocabulary: 256 byte-level pieces, then added tokens
// named like Llama 3's and Qwen's (<|begin_of_text|>, <|eot_id|>, <|im_start|>, <|im_end|>,
// <|endoftext|>), one id left unused.
//
// Input: the file's text.
// Invariants: pieces, types and merges stay as they were; a refused file is INVALID_ARGUMENT naming
// the file; an accepted one sets only ids in range whose piece is used (not kUnused), add_bos only
// with a bos id, a chat template no longer than the input (one string of it, copied), and was
// nested within kMaxJsonNesting (counted outside strings here, independently of the parser).

#include <algorithm>
#include <string>
#include <string_view>

#include "common/bounded_json.h"
#include "daemon/text/bpe_spec.h"
#include "daemon/text/byte_level.h"
#include "daemon/text/tokenizer_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using niels::daemon::text::BpeSpec;
using niels::daemon::text::TokenType;

BpeSpec Vocabulary() {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    const char c = static_cast<char>(b);
    niels::daemon::text::AppendByteLevel(std::string_view(&c, 1), &piece);
    spec.pieces.push_back(piece);
    spec.types.push_back(TokenType::kNormal);
  }
  for (const char* added : {"<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    spec.pieces.push_back(added);
    spec.types.push_back(TokenType::kControl);
  }
  spec.pieces.push_back("");
  spec.types.push_back(TokenType::kUnused);
  spec.merges = {{"h", "e"}, {"Ġ", "t"}};
  return spec;
}

const BpeSpec& Original() {
  static const BpeSpec spec = Vocabulary();
  return spec;
}

void CheckId(const std::optional<int32_t>& id, const BpeSpec& spec) {
  if (!id) return;
  FUZZ_CHECK(*id >= 0 && static_cast<size_t>(*id) < spec.pieces.size());
  FUZZ_CHECK(spec.types[static_cast<size_t>(*id)] != TokenType::kUnused);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  BpeSpec spec = Original();
  const auto status = niels::daemon::text::ApplyTokenizerConfigJson(text, "tokenizer_config.json", &spec);
  FUZZ_CHECK(spec.pieces == Original().pieces && spec.types == Original().types && spec.merges == Original().merges);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == niels::common::StatusCode::kInvalidArgument);
    FUZZ_CHECK(status.message().rfind("tokenizer_config.json: ", 0) == 0);
    return 0;
  }
  CheckId(spec.special.bos, spec);
  CheckId(spec.special.eos, spec);
  CheckId(spec.special.pad, spec);
  FUZZ_CHECK(!spec.special.add_bos || spec.special.bos.has_value());
  FUZZ_CHECK(spec.chat_template.size() <= size);
  FUZZ_CHECK(niels::fuzz::JsonBracketDepth(text) <= niels::common::kMaxJsonNesting);
  return 0;
}
