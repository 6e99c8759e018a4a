#pragma once
// The tokenizer of a GGUF file from its tokenizer.* metadata (docs/ARCHITECTURE.md, "Loading a
// model"), as llama.cpp reads it:
//   tokenizer.ggml.model "gpt2" (byte-level BPE) with tokenizer.ggml.pre "llama-bpe" (Llama 3.x,
//     merges ignored for pre-tokens that are whole pieces) or "qwen2" (Qwen2.5, Qwen3): tokens,
//     token_type (default: all normal), merges ("a b"), bos/eos/padding ids, add_bos_token
//     (default: true for llama-bpe, as llama.cpp does, else false), tokenizer.chat_template.
//     Unused ids (type 5) keep no text.
//   "llama" (SentencePiece BPE by scores: Llama 2, Mistral, niels-export's GGUF of a BPE tokenizer):
//     tokens, scores and token_type (all three required, of one length), add_space_prefix (default
//     true), bos/eos/unknown/padding ids, add_bos_token (default true, as llama.cpp), the chat
//     template; becomes a SentencePieceVocabulary (text/sentencepiece_proto.h) that nielsd loads with
//     SentencePiece itself, normalized as llama.cpp does (gguf_sentencepiece.h says what is checked).
//   "t5" (SentencePiece unigram) and every other model are refused, naming the key and value.
// Stop ids: eos, eot and eom (tokenizer.ggml.{eos,eot,eom}_token_id), and every control token whose
// text marks an end of turn or text in the known chat formats (<|eot_id|>, <|eom_id|>,
// <|end_of_text|>, <|im_end|>, <|endoftext|>): llama.cpp's converter writes no eot id for Llama 3
// and Qwen, and llama.cpp finds them by their text.
// Pure: reads the GgufFile only. Safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/formats/gguf_file.h"
#include "daemon/text/bpe_spec.h"
#include "daemon/text/sentencepiece_proto.h"

namespace niels::daemon::loaders {

struct GgufTokenizer {
  // Exactly one is set: the byte-level BPE tokenizer ("gpt2"; its chat_template and special ids
  // filled too) or the SentencePiece vocabulary ("llama").
  std::optional<text::BpeSpec> bpe;
  std::optional<text::SentencePieceVocabulary> sentencepiece;
  text::SpecialTokenIds special;
  std::string chat_template;      // "" when the file has none
  std::vector<int32_t> stop_ids;  // ascending, unique, never empty
};

// Reads the tokenizer of a model of `vocab_size` ids (token_embd.weight's rows; the tokens must be
// as many). INVALID_ARGUMENT naming the file and key for a missing or mistyped key, a refused
// tokenizer model or pre-tokenizer, a token type outside 1..6, a merge that is not two pieces, a
// SentencePiece vocabulary SentencePiece or llama.cpp would not run alike (gguf_sentencepiece.h),
// a special id out of range, no end-of-sequence id at all.
common::StatusOr<GgufTokenizer> ReadGgufTokenizer(const formats::GgufFile& file, int64_t vocab_size);

}  // namespace niels::daemon::loaders
