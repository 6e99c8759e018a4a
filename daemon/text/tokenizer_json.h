#pragma once
// Reading a Hugging Face tokenizer.json (and tokenizer_config.json) into a BpeSpec.
//
// Supported: model type "BPE" (vocab; merges as "a b" strings or ["a", "b"] pairs; ignore_merges;
// unk_token and fuse_unk; byte_fallback false; no dropout, continuing_subword_prefix or
// end_of_word_suffix), added_tokens (id, content, special, lstrip, rstrip, single_word,
// normalized; a missing flag is false), normalizer null or NFC (alone or in a Sequence),
// pre_tokenizer ByteLevel (use_regex adds GPT-2's split; add_prefix_space must be false) or a
// Sequence of Split steps (Regex pattern, behavior "Isolated", invert false) ending in ByteLevel,
// and a ByteLevel decoder. The post_processor is not applied (Encode adds no BOS); it only tells
// whether the model's encoder prepends a special token (SpecialTokenIds::add_bos).
// Anything else is refused: UNIMPLEMENTED naming the key and the value found.
//
// The JSON is parsed with simdjson. Errors name the file, the key path ("model.merges[12]") and
// what was expected; a syntax error names the byte offset, line and column.

#include <filesystem>
#include <string_view>

#include "common/status.h"
#include "daemon/text/bpe_spec.h"

namespace niels::daemon::text {

// Parses the text of a tokenizer.json; `source` names it in messages. INVALID_ARGUMENT for
// malformed JSON or a missing or mistyped key, a vocabulary id that is negative, repeated for two
// pieces or beyond BpeTokenizer::kMaxVocabSize (or leaves more than 1024 ids unused), a merge
// that is not two pieces; UNIMPLEMENTED for what the list above leaves out.
common::StatusOr<BpeSpec> BpeSpecFromTokenizerJson(std::string_view json, std::string_view source);

// Reads dir/tokenizer.json and, if it exists, dir/tokenizer_config.json
// (daemon/text/tokenizer_config.h). NOT_FOUND if a file is there but unreadable or tokenizer.json
// is missing; otherwise the errors of either reader.
common::StatusOr<BpeSpec> LoadBpeSpecFromDirectory(const std::filesystem::path& dir);

}  // namespace niels::daemon::text
