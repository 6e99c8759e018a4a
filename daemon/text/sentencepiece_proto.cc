#include "daemon/text/sentencepiece_proto.h"

#include <cstdint>
#include <cstring>
#include <string_view>

namespace niels::daemon::text {
namespace {

// Field numbers of sentencepiece_model.proto (SentencePiece 0.1.x and 0.2.x alike).
// ModelProto
constexpr uint32_t kModelPieces = 1;          // repeated SentencePiece
constexpr uint32_t kModelTrainerSpec = 2;     // TrainerSpec
constexpr uint32_t kModelNormalizerSpec = 3;  // NormalizerSpec
// ModelProto.SentencePiece
constexpr uint32_t kPiecePiece = 1;  // string
constexpr uint32_t kPieceScore = 2;  // float
constexpr uint32_t kPieceType = 3;   // enum Type: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
// TrainerSpec
constexpr uint32_t kTrainerModelType = 3;     // enum ModelType: UNIGRAM 1, BPE 2, WORD 3, CHAR 4
constexpr uint32_t kTrainerVocabSize = 4;     // int32
constexpr uint32_t kTrainerByteFallback = 35; // bool
constexpr uint64_t kModelTypeBpe = 2;
// NormalizerSpec
constexpr uint32_t kNormalizerName = 1;                     // string
constexpr uint32_t kNormalizerAddDummyPrefix = 3;           // bool, default true
constexpr uint32_t kNormalizerRemoveExtraWhitespaces = 4;   // bool, default true
constexpr uint32_t kNormalizerEscapeWhitespaces = 5;        // bool, default true

constexpr uint32_t kVarint = 0, kFixed32 = 5, kLengthDelimited = 2;

void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void Tag(std::string& out, uint32_t field, uint32_t wire_type) { Varint(out, (uint64_t{field} << 3) | wire_type); }

void VarintField(std::string& out, uint32_t field, uint64_t value) {
  Tag(out, field, kVarint);
  Varint(out, value);
}

void BytesField(std::string& out, uint32_t field, std::string_view bytes) {
  Tag(out, field, kLengthDelimited);
  Varint(out, bytes.size());
  out.append(bytes);
}

// A float as protobuf stores it: 4 bytes, little-endian IEEE 754.
void FloatField(std::string& out, uint32_t field, float value) {
  Tag(out, field, kFixed32);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

}  // namespace

std::string SerializeBpeModelProto(const SentencePieceVocabulary& vocabulary) {
  std::string out;
  std::string piece;
  for (size_t i = 0; i < vocabulary.pieces.size(); ++i) {
    piece.clear();
    BytesField(piece, kPiecePiece, vocabulary.pieces[i]);
    FloatField(piece, kPieceScore, vocabulary.scores[i]);
    VarintField(piece, kPieceType, static_cast<uint64_t>(vocabulary.types[i]));
    BytesField(out, kModelPieces, piece);
  }
  std::string trainer;
  VarintField(trainer, kTrainerModelType, kModelTypeBpe);
  VarintField(trainer, kTrainerVocabSize, vocabulary.pieces.size());
  VarintField(trainer, kTrainerByteFallback, vocabulary.byte_fallback ? 1 : 0);
  BytesField(out, kModelTrainerSpec, trainer);
  // Every flag written out: proto2 defaults would turn on the whitespace removal.
  std::string normalizer;
  BytesField(normalizer, kNormalizerName, "identity");
  VarintField(normalizer, kNormalizerAddDummyPrefix, vocabulary.add_dummy_prefix ? 1 : 0);
  VarintField(normalizer, kNormalizerRemoveExtraWhitespaces, 0);
  VarintField(normalizer, kNormalizerEscapeWhitespaces, 1);
  BytesField(out, kModelNormalizerSpec, normalizer);
  return out;
}

}  // namespace niels::daemon::text
