#pragma once
// A SentencePiece BPE model (the serialized ModelProto that SentencePieceProcessor loads) written
// from a plain vocabulary: what a GGUF file's llama.cpp "llama" (SentencePiece) vocabulary becomes
// (docs/ARCHITECTURE.md, "Loading a model"; daemon/loaders/gguf_tokenizer.h).
//
// The model is the tokenizer llama.cpp's llama vocabulary describes: pieces with their scores and
// types, BPE by scores with byte fallback, and a normalizer that does nothing but what llama.cpp
// does to text before it merges: no normalization rule ("identity", no character map), no removal
// of extra whitespace, spaces escaped as U+2581, and a U+2581 put before the text when
// `add_dummy_prefix`. Protobuf wire format written by hand (field numbers of SentencePiece's
// sentencepiece_model.proto, cited at each use); SentencePiece itself validates what it loads.
// Pure functions; safe from any thread.

#include <string>
#include <vector>

#include "daemon/text/bpe_spec.h"

namespace niels::daemon::text {

struct SentencePieceVocabulary {
  // Id -> the piece (U+2581 for a space; "<0x41>" for a byte piece), its score (merge priority:
  // higher merges first) and its type. Same length.
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;  // the values of SentencePiece's ModelProto.SentencePiece.Type
  // Put U+2581 before the text (SentencePiece's add_dummy_prefix, GGUF add_space_prefix).
  bool add_dummy_prefix = true;
  // The model has the 256 byte pieces <0x00>..<0xFF> and encodes a character without a piece as
  // its UTF-8 bytes (SentencePiece's byte_fallback; llama.cpp's llama vocabulary always does).
  bool byte_fallback = true;
};

// The serialized ModelProto of `vocabulary` (BPE; the normalizer above). REQUIRES: pieces, scores
// and types of the same length. Whether SentencePiece accepts it (one unknown piece, the byte pieces
// when byte_fallback, no empty or repeated piece) is checked when it is loaded.
std::string SerializeBpeModelProto(const SentencePieceVocabulary& vocabulary);

}  // namespace niels::daemon::text
