#include "daemon/loaders/gguf_sentencepiece.h"

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using formats::GgufFile;
using text::TokenType;

constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kScores = "tokenizer.ggml.scores";
constexpr std::string_view kTypes = "tokenizer.ggml.token_type";

Status Refuse(const GgufFile& file, std::string_view key, const std::string& what) {
  return Status::InvalidArgument(fmt::format("{}: key \"{}\": {}", file.path().string(), key, what));
}

constexpr std::string_view kVocabularyKeys = "a SentencePiece vocabulary needs tokens, scores and token_type";

// The byte of a piece spelled <0xXX> (upper-case hex, as SentencePiece and llama.cpp spell them).
std::optional<int> BytePieceValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return value;
}

Status ReadScores(const GgufFile& file, size_t count, text::SentencePieceVocabulary* out) {
  auto scores = formats::RequiredKey(file.GetFloatArray(kScores, count), file, kScores, kVocabularyKeys);
  if (!scores.ok()) return scores.status();
  if (scores->size() != count) {
    return Refuse(file, kScores, fmt::format("{} scores for {} tokens", scores->size(), count));
  }
  out->scores.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const double score = (*scores)[i];
    if (!std::isfinite(score) || std::fabs(score) > 3.4e38) {
      return Refuse(file, kScores, fmt::format("[{}] = {} is not a finite float score", i, score));
    }
    out->scores.push_back(static_cast<float>(score));
  }
  return Status::Ok();
}

Status ReadTypes(const GgufFile& file, size_t count, text::SentencePieceVocabulary* out) {
  auto types = formats::RequiredKey(file.GetIntArray(kTypes, count), file, kTypes, kVocabularyKeys);
  if (!types.ok()) return types.status();
  if (types->size() != count) {
    return Refuse(file, kTypes, fmt::format("{} entries for {} tokens", types->size(), count));
  }
  out->types.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const int64_t value = (*types)[i];
    const auto type = value >= 1 && value <= 6 ? text::TokenTypeFromGguf(static_cast<int32_t>(value)) : std::nullopt;
    if (!type) return Refuse(file, kTypes, fmt::format("[{}] = {} is not a token type (1..6)", i, value));
    if (*type == TokenType::kUserDefined || *type == TokenType::kUnused) {
      return Refuse(file, kTypes, fmt::format(
          "[{}] = {} ({} token \"{}\"): SentencePiece vocabularies with {} tokens are not supported (llama.cpp {})", i,
          value, *type == TokenType::kUnused ? "unused" : "user-defined", out->pieces[i],
          *type == TokenType::kUnused ? "unused" : "user-defined",
          *type == TokenType::kUnused ? "produces them from text, SentencePiece never does"
                                      : "splits them out of text with a space after each, SentencePiece does not"));
    }
    out->types.push_back(*type);
  }
  return Status::Ok();
}

// No empty or repeated token; one unknown token (the unknown_token_id's, if given); the 256 bytes.
Status CheckPieces(const GgufFile& file, const text::SentencePieceVocabulary& v) {
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(v.pieces.size());
  std::optional<size_t> unknown;
  std::array<int64_t, 256> byte_id;
  byte_id.fill(-1);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const std::string_view piece = v.pieces[i];
    if (piece.empty()) return Refuse(file, kTokens, fmt::format("[{}] is empty", i));
    if (auto [it, added] = seen.emplace(piece, i); !added) {
      return Refuse(file, kTokens, fmt::format("[{}] = \"{}\" repeats token {}", i, piece, it->second));
    }
    if (v.types[i] == TokenType::kUnknown) {
      if (unknown) return Refuse(file, kTypes, fmt::format("tokens {} and {} are both unknown (2)", *unknown, i));
      unknown = i;
    }
    if (v.types[i] != TokenType::kByte) continue;
    const std::optional<int> byte = BytePieceValue(piece);
    if (!byte) return Refuse(file, kTokens, fmt::format("[{}] = \"{}\" is a byte token (6) not spelled <0xXX>", i, piece));
    byte_id[static_cast<size_t>(*byte)] = static_cast<int64_t>(i);
  }
  if (!unknown) return Refuse(file, kTypes, "no unknown token (type 2): SentencePiece needs one");
  for (size_t b = 0; b < byte_id.size(); ++b) {
    if (byte_id[b] < 0) {
      return Refuse(file, kTokens, fmt::format("no byte token <0x{:02X}> (type 6): llama.cpp falls back to the 256 "
                                               "byte tokens for every character without a token",
                                               b));
    }
  }
  auto unk_id = file.GetUint("tokenizer.ggml.unknown_token_id");
  if (!unk_id.ok() && unk_id.status().code() != common::StatusCode::kNotFound) return unk_id.status();
  if (unk_id.ok() && *unk_id != *unknown) {
    return Refuse(file, "tokenizer.ggml.unknown_token_id",
                  fmt::format("{} is not the unknown token, which is {} (\"{}\")", *unk_id, *unknown, v.pieces[*unknown]));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<text::SentencePieceVocabulary> ReadGgufSentencePiece(const GgufFile& file,
                                                              const std::vector<std::string_view>& tokens) {
  text::SentencePieceVocabulary v;
  v.pieces.assign(tokens.begin(), tokens.end());
  NIELS_RETURN_IF_ERROR(ReadScores(file, tokens.size(), &v));
  NIELS_RETURN_IF_ERROR(ReadTypes(file, tokens.size(), &v));
  NIELS_RETURN_IF_ERROR(CheckPieces(file, v));
  auto prefix = file.GetBool("tokenizer.ggml.add_space_prefix");
  if (!prefix.ok() && prefix.status().code() != common::StatusCode::kNotFound) return prefix.status();
  v.add_dummy_prefix = prefix.ok() ? *prefix : true;  // llama.cpp's default for this vocabulary
  v.byte_fallback = true;
  return v;
}

}  // namespace niels::daemon::loaders
