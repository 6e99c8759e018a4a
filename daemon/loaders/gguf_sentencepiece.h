#pragma once
// A GGUF file's SentencePiece vocabulary (tokenizer.ggml.model "llama": Llama 2, Mistral,
// niels-export's GGUF of a BPE tokenizer) as a text::SentencePieceVocabulary (gguf_tokenizer.h).
//
// llama.cpp's "llama" tokenizer is SentencePiece's BPE without its normalizer: a space before the
// text (add_space_prefix) and after every special token, spaces as U+2581, pieces merged by score,
// a character without a piece as its UTF-8 bytes <0xXX>. SentencePiece with the model
// SerializeBpeModelProto writes does the same for every vocabulary this reader accepts. It refuses,
// naming the key and the token, what the two would run differently or SentencePiece cannot load:
//   - tokenizer.ggml.scores or .token_type missing, of another length than .tokens, a score that is
//     not finite, a type outside 1..6;
//   - user-defined (4) tokens (llama.cpp splits them out of plain text and puts a space after them;
//     SentencePiece matches them inside words) and unused (5) ones (llama.cpp produces them from
//     text, SentencePiece never does);
//   - not exactly one unknown (2) token; an unknown_token_id that names another;
//   - an empty token, a token listed twice;
//   - a byte (6) token not spelled <0xXX> (two upper-case hex digits), a byte listed twice or one of
//     the 256 missing (llama.cpp falls back to them for every character without a piece).
// Pure: reads the GgufFile only. Safe from any thread.

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/formats/gguf_file.h"
#include "daemon/text/sentencepiece_proto.h"

namespace niels::daemon::loaders {

// `tokens` is tokenizer.ggml.tokens (already checked against the embedding's rows). INVALID_ARGUMENT
// naming the file, the key and the index for each refusal above.
common::StatusOr<text::SentencePieceVocabulary> ReadGgufSentencePiece(const formats::GgufFile& file,
                                                                      const std::vector<std::string_view>& tokens);

}  // namespace niels::daemon::loaders
