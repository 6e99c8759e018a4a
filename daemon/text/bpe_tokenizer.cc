#include "daemon/text/bpe_tokenizer.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/text/byte_level.h"
#include "daemon/text/utf8_repair.h"

namespace niels::daemon::text {
namespace {

bool IsAddedType(TokenType type) { return type == TokenType::kControl || type == TokenType::kUserDefined; }

common::Status CheckOptionalId(const std::optional<int32_t>& id, size_t size, std::string_view what) {
  if (id && (*id < 0 || static_cast<size_t>(*id) >= size)) {
    return common::Status::InvalidArgument(fmt::format("{} id {} is out of range (vocabulary of {})", what, *id, size));
  }
  return common::Status::Ok();
}

}  // namespace

BpeTokenizer::~BpeTokenizer() = default;

common::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeSpec spec) {
  if (spec.pieces.empty()) return common::Status::InvalidArgument("the vocabulary is empty");
  if (spec.pieces.size() > kMaxVocabSize) {
    return common::Status::InvalidArgument(
        fmt::format("vocabulary of {} tokens is larger than the limit of {}", spec.pieces.size(), kMaxVocabSize));
  }
  if (spec.types.size() != spec.pieces.size()) {
    return common::Status::InvalidArgument(
        fmt::format("{} token types for {} tokens", spec.types.size(), spec.pieces.size()));
  }
  NIELS_RETURN_IF_ERROR(CheckOptionalId(spec.unk, spec.pieces.size(), "unknown token"));
  NIELS_RETURN_IF_ERROR(CheckOptionalId(spec.special.bos, spec.pieces.size(), "bos"));
  NIELS_RETURN_IF_ERROR(CheckOptionalId(spec.special.eos, spec.pieces.size(), "eos"));
  NIELS_RETURN_IF_ERROR(CheckOptionalId(spec.special.pad, spec.pieces.size(), "pad"));

  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer());
  tokenizer->pieces_ = std::move(spec.pieces);
  tokenizer->types_ = std::move(spec.types);
  tokenizer->special_ = spec.special;
  tokenizer->chat_template_ = std::move(spec.chat_template);
  auto model = BpeModel::Build(tokenizer->pieces_, tokenizer->types_, spec);
  if (!model.ok()) return model.status();
  tokenizer->model_ = std::move(model).value();
  auto pre = PreTokenizer::Create(spec.pre_tokenizer);
  if (!pre.ok()) return pre.status();
  tokenizer->pre_tokenizer_ = std::move(pre).value();
  NIELS_RETURN_IF_ERROR(tokenizer->BuildAddedTokens(spec.added_flags));
  NIELS_RETURN_IF_ERROR(tokenizer->BuildTokenBytes());
  return tokenizer;
}

common::Status BpeTokenizer::BuildAddedTokens(const std::vector<std::pair<int32_t, AddedTokenFlags>>& flags) {
  std::vector<AddedTokenFlags> flags_by_index;  // parallel to the added ids, in id order
  std::vector<int32_t> added;
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (IsAddedType(types_[id]) && !pieces_[id].empty()) added.push_back(static_cast<int32_t>(id));
  }
  flags_by_index.resize(added.size());
  for (const auto& [id, f] : flags) {
    const auto it = std::lower_bound(added.begin(), added.end(), id);
    if (it == added.end() || *it != id) {
      return common::Status::InvalidArgument(fmt::format("added-token flags for id {}, which is no added token", id));
    }
    flags_by_index[static_cast<size_t>(it - added.begin())] = f;
  }
  std::vector<AddedTokenMatcher::Token> raw, normalized;
  for (size_t i = 0; i < added.size(); ++i) {
    const int32_t id = added[i];
    const std::string& content = pieces_[static_cast<size_t>(id)];
    if (!added_ids_.emplace(content, id).second) continue;  // the same text twice: the lower id wins
    AddedTokenMatcher::Token token{id, content, types_[static_cast<size_t>(id)] == TokenType::kControl,
                                   flags_by_index[i]};
    if (token.flags.normalized && pre_tokenizer_->normalization() == Normalization::kNfc) {
      token.content.clear();
      AppendNfc(content, &token.content);
      if (token.content != content) normalized_text_.emplace(id, token.content);
    }
    (token.flags.normalized ? normalized : raw).push_back(std::move(token));
  }
  raw_tokens_ = std::make_unique<AddedTokenMatcher>(std::move(raw));
  normalized_tokens_ = std::make_unique<AddedTokenMatcher>(std::move(normalized));
  return common::Status::Ok();
}

common::Status BpeTokenizer::BuildTokenBytes() {
  size_t total = 0;
  for (const std::string& piece : pieces_) total += piece.size();
  if (total >= (size_t{1} << 32)) return common::Status::InvalidArgument("the vocabulary's pieces exceed 4 GiB");
  token_bytes_.reserve(total);
  bytes_offsets_.resize(pieces_.size() + 1);
  for (size_t id = 0; id < pieces_.size(); ++id) {
    bytes_offsets_[id] = static_cast<uint32_t>(token_bytes_.size());
    // As Hugging Face's ByteLevel decoder: a piece spelled in the byte-level alphabet stands for
    // the bytes it spells; any other (an added token with a space, say) for its own UTF-8. A
    // normalized added token is decoded from its normalized text, as Hugging Face does.
    const auto normalized = normalized_text_.find(static_cast<int32_t>(id));
    const std::string& text = normalized != normalized_text_.end() ? normalized->second : pieces_[id];
    if (types_[id] != TokenType::kUnused && !AppendDecodedByteLevel(text, &token_bytes_)) token_bytes_.append(text);
  }
  bytes_offsets_[pieces_.size()] = static_cast<uint32_t>(token_bytes_.size());
  return common::Status::Ok();
}

common::Status BpeTokenizer::EncodeNormalized(std::string_view text, BpeModel::Scratch* scratch,
                                              std::vector<int32_t>* ids) const {
  std::vector<std::string_view> words;
  NIELS_RETURN_IF_ERROR(pre_tokenizer_->Split(text, &words));
  for (std::string_view word : words) model_->Encode(word, scratch, ids);
  return common::Status::Ok();
}

common::Status BpeTokenizer::EncodeGap(std::string_view gap, bool parse_special, BpeModel::Scratch* scratch,
                                       std::vector<int32_t>* ids) const {
  std::string normalized;
  if (pre_tokenizer_->normalization() == Normalization::kNfc) {
    AppendNfc(gap, &normalized);
    gap = normalized;
  }
  if (normalized_tokens_->empty()) return EncodeNormalized(gap, scratch, ids);
  std::vector<AddedTokenMatcher::Segment> segments;
  normalized_tokens_->Split(gap, parse_special, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      ids->push_back(segment.id);
    } else {
      NIELS_RETURN_IF_ERROR(EncodeNormalized(gap.substr(segment.begin, segment.end - segment.begin), scratch, ids));
    }
  }
  return common::Status::Ok();
}

common::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text, bool parse_special) const {
  return EncodeWithPlain(text, parse_special, {});
}

common::StatusOr<std::vector<int32_t>> BpeTokenizer::EncodeRenderedKeepingText(std::string_view text,
                                                                               std::span<const TextRange> plain) const {
  return EncodeWithPlain(text, true, plain);
}

std::vector<TextRange> BpeTokenizer::FindSpecialLiterals(std::string_view text) const {
  std::vector<TextRange> found;
  if (text.size() > kMaxTextBytes || !IsValidUtf8(text)) return found;
  std::vector<AddedTokenMatcher::Segment> segments, inner;
  raw_tokens_->Split(text, true, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      if (!IsSpecial(segment.id)) continue;
      // The segment holds the literal and any whitespace lstrip/rstrip took.
      const std::string_view literal = pieces_[static_cast<size_t>(segment.id)];
      const size_t at = text.substr(0, segment.end).find(literal, segment.begin);
      if (at != std::string_view::npos) found.push_back({at, at + literal.size()});
      continue;
    }
    if (normalized_tokens_->empty()) continue;
    inner.clear();
    normalized_tokens_->Split(text.substr(segment.begin, segment.end - segment.begin), true, &inner);
    for (const auto& piece : inner) {
      if (piece.id < 0 || !IsSpecial(piece.id)) continue;
      const std::string_view literal = pieces_[static_cast<size_t>(piece.id)];
      const size_t at = text.substr(0, segment.begin + piece.end).find(literal, segment.begin + piece.begin);
      if (at != std::string_view::npos) found.push_back({at, at + literal.size()});
    }
  }
  return found;
}

common::StatusOr<std::vector<int32_t>> BpeTokenizer::EncodeWithPlain(std::string_view text, bool parse_special,
                                                                     std::span<const TextRange> plain) const {
  if (text.size() > kMaxTextBytes) {
    return common::Status::InvalidArgument(
        fmt::format("text of {} bytes is longer than the tokenizer's limit of {}", text.size(), kMaxTextBytes));
  }
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = RepairUtf8(text);
    text = repaired;
    // The ranges were of the text before its repair: keep every literal text.
    if (!plain.empty()) parse_special = false;
    plain = {};
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  BpeModel::Scratch scratch;
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_tokens_->Split(text, parse_special, &segments, plain);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      const bool gap_special = parse_special && !OverlapsAny(plain, segment.begin, segment.end);
      NIELS_RETURN_IF_ERROR(
          EncodeGap(text.substr(segment.begin, segment.end - segment.begin), gap_special, &scratch, &ids));
    }
  }
  return ids;
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && IsSpecial(id)) continue;
    bytes.append(TokenBytes(id));
  }
  if (IsValidUtf8(bytes)) return bytes;
  return RepairUtf8(bytes);
}

std::string_view BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const auto i = static_cast<size_t>(id);
  return std::string_view(token_bytes_).substr(bytes_offsets_[i], bytes_offsets_[i + 1] - bytes_offsets_[i]);
}

std::string BpeTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view piece) const {
  if (const auto it = added_ids_.find(piece); it != added_ids_.end()) return it->second;
  return model_->PieceId(piece);
}

TokenType BpeTokenizer::type(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return TokenType::kUnused;
  return types_[static_cast<size_t>(id)];
}

bool BpeTokenizer::IsAdded(int32_t id) const { return IsAddedType(type(id)); }

bool BpeTokenizer::IsTextPiece(int32_t id) const {
  const TokenType t = type(id);
  return t != TokenType::kUnused && t != TokenType::kControl;
}

TextBytes BpeTokenizer::Bytes(int32_t id) const {
  TextBytes out;
  if (!IsTextPiece(id)) return out;
  out.is_text = true;
  out.bytes = std::string(TokenBytes(id));
  out.at_start = out.bytes;
  return out;
}

}  // namespace niels::daemon::text
