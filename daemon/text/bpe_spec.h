#pragma once
// BpeSpec: everything a byte-level BPE tokenizer is made of, as plain data. Both sources of a
// tokenizer fill it: a Hugging Face tokenizer.json (daemon/text/tokenizer_json.h) and a GGUF file's
// tokenizer.ggml.* metadata (tokens, token_type, merges, pre); BpeTokenizer::Create builds the
// tokenizer from it. No behaviour lives here besides the table of known pre-tokenizers.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace niels::daemon::text {

// What a token id is, with the values of GGUF's tokenizer.ggml.token_type (llama.cpp's
// LLAMA_TOKEN_TYPE_*). A tokenizer.json gives kNormal to its model vocabulary, kControl to an added
// token with "special": true and kUserDefined to one with "special": false.
enum class TokenType : uint8_t {
  kNormal = 1,       // a BPE piece, spelled in the byte-level alphabet ("Ġthe")
  kUnknown = 2,      // the unknown token (never produced by a byte-level vocabulary)
  kControl = 3,      // a special added token (<|im_start|>, <|eot_id|>): matched only when the
                     // caller parses special tokens, skipped by Decode(skip_special)
  kUserDefined = 4,  // a non-special added token (Qwen3's <think>): always matched, always decoded
  kUnused = 5,       // an id with no token (a hole in the vocabulary); never produced
  kByte = 6,         // a byte token (<0x0A>), treated as a normal piece
};

// The flags of a Hugging Face added token beyond "special" (which is the kControl type). All
// false in the files of Llama 3.x, Qwen2.5 and Qwen3 and in every GGUF file.
struct AddedTokenFlags {
  bool lstrip = false;       // the match also takes the whitespace before it
  bool rstrip = false;       // the match also takes the whitespace after it
  bool single_word = false;  // matches only where no word character touches it on either side
  bool normalized = false;   // matched in the normalized text, against its normalized content
};

enum class Normalization : uint8_t {
  kNone,  // the text is split as it is (Llama 3)
  kNfc,   // Unicode NFC before pre-tokenization (tokenizer.json "normalizer": {"type": "NFC"}: Qwen)
};

// How text is cut into pre-tokens before BPE: the Split regexes, applied in order (each splits the
// pieces of the one before, keeping matches and the text between them: HF's "Isolated"
// behaviour), in Hugging Face's (Oniguruma's) syntax, and the normalization before them.
struct PreTokenizerSetup {
  std::vector<std::string> split_patterns;
  Normalization normalization = Normalization::kNone;
};

// The special ids a model's files name (tokenizer_config.json, or GGUF's
// tokenizer.ggml.{bos,eos,padding}_token_id and add_bos_token). Informational: Encode never adds
// any of them; the chat template and the engine decide.
struct SpecialTokenIds {
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  std::optional<int32_t> pad;
  bool add_bos = false;  // whether the model's own encoder puts bos in front of a text
};

struct BpeSpec {
  // Token id -> its piece as the file spells it: byte-level for kNormal ("Ġthe" is " the"), the
  // literal text for added tokens ("<|im_start|>"), "" for kUnused. Ids are 0 .. size()-1.
  std::vector<std::string> pieces;
  // Token id -> type; same length as pieces.
  std::vector<TokenType> types;
  // The merges by rank (rank = index): each pair of byte-level pieces merges into their
  // concatenation, which must be a kNormal piece too. A pair listed twice keeps its last rank
  // (as Hugging Face tokenizers does).
  std::vector<std::pair<std::string, std::string>> merges;
  // Flags of added tokens (kControl / kUserDefined ids); ids not listed have all flags false.
  std::vector<std::pair<int32_t, AddedTokenFlags>> added_flags;
  PreTokenizerSetup pre_tokenizer;
  // tokenizer.json model.ignore_merges (Llama 3): a pre-token that is itself a vocabulary piece is
  // that piece, without running the merges.
  bool ignore_merges = false;
  // The unknown token for a byte whose one-byte piece is missing (none: such a byte is dropped,
  // as Hugging Face's BPE without unk_token does); fuse_unk joins consecutive unknowns.
  std::optional<int32_t> unk;
  bool fuse_unk = false;
  SpecialTokenIds special;
  // tokenizer_config.json "chat_template" (the string, or the entry named "default" of a list);
  // empty when there is none.
  std::string chat_template;
};

// The split regexes of Llama 3 (tokenizer.json of Llama 3, 3.1, 3.2; GGUF pre "llama-bpe") and of
// Qwen2/Qwen2.5/Qwen3 (GGUF pre "qwen2"): the same except that Llama 3 takes digits in runs of up
// to three and Qwen one by one.
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// For a GGUF loader: the TokenType of a tokenizer.ggml.token_type value (1..6), nullopt for any other.
std::optional<TokenType> TokenTypeFromGguf(int32_t value);

// Splits a merge written "a b" (GGUF's tokenizer.ggml.merges, tokenizer.json before tokenizers
// 0.20) at its one space. INVALID_ARGUMENT naming `index` and the line if there is not exactly one
// space (byte-level pieces never hold a space: it is spelled 'Ġ').
common::StatusOr<std::pair<std::string, std::string>> SplitMergeLine(std::string_view line, size_t index);

// The pre-tokenizer a GGUF file names in tokenizer.ggml.pre: "llama-bpe" (also "llama3",
// "llama-v3") -> Llama 3's split, no normalization; "qwen2" -> Qwen's split with NFC, as the
// models' tokenizer.json has it (llama.cpp itself does not normalize). Any other name:
// UNIMPLEMENTED naming it.
common::StatusOr<PreTokenizerSetup> PreTokenizerForGgufName(std::string_view name);

}  // namespace niels::daemon::text
