#include "daemon/text/sentencepiece_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <sentencepiece_processor.h>

#include "daemon/text/sentencepiece_runtime.h"

namespace niels::daemon::text {
namespace {

using common::Status;
using common::StatusOr;

// How special literals are kept out of Encode: the model is loaded with the four special pieces
// retyped from USER_DEFINED to CONTROL. SentencePiece matches user-defined pieces in the input text,
// but never produces a control piece from text (control pieces are neither in the matcher nor in
// the BPE/unigram vocabulary), so a literal in user text is segmented like any other text, with the
// same whitespace handling as the rest of the string. Ids do not change, so PieceToId and Decode are
// unaffected. The retyping edits the serialized ModelProto (field numbers from sentencepiece_model.proto:
// ModelProto.pieces = 1; SentencePiece.piece = 1, .type = 3; Type CONTROL = 3).
constexpr uint32_t kModelPiecesField = 1;
constexpr uint32_t kPieceStringField = 1;
constexpr uint32_t kPieceTypeField = 3;
constexpr uint64_t kTypeControl = 3;

bool ReadVarint(std::string_view s, size_t& pos, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(s[pos++]);
    out |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80u) == 0) return true;
  }
  return false;
}

void WriteVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  std::string_view raw;      // the whole field, tag included
  std::string_view payload;  // length-delimited fields only
};

// Reads the field at `pos`; false on malformed input (groups are not used by ModelProto).
bool ReadField(std::string_view s, size_t& pos, Field& f) {
  const size_t start = pos;
  uint64_t tag = 0, value = 0;
  if (!ReadVarint(s, pos, tag)) return false;
  f.number = static_cast<uint32_t>(tag >> 3);
  f.wire_type = static_cast<uint32_t>(tag & 7);
  f.payload = {};
  switch (f.wire_type) {
    case 0: if (!ReadVarint(s, pos, value)) return false; break;
    case 1: if (s.size() - pos < 8) return false; pos += 8; break;
    case 5: if (s.size() - pos < 4) return false; pos += 4; break;
    case 2:
      if (!ReadVarint(s, pos, value) || value > s.size() - pos) return false;
      f.payload = s.substr(pos, value);
      pos += value;
      break;
    default: return false;
  }
  f.raw = s.substr(start, pos - start);
  return true;
}

// A SentencePiece message with its type field replaced by CONTROL when its piece is in `specials`.
bool RetypePiece(std::string_view piece_msg, const std::array<std::string_view, 4>& specials, std::string& out) {
  std::string_view piece;
  std::string rest;
  size_t pos = 0;
  Field f;
  while (pos < piece_msg.size()) {
    if (!ReadField(piece_msg, pos, f)) return false;
    if (f.number == kPieceStringField && f.wire_type == 2) piece = f.payload;
    if (f.number != kPieceTypeField) rest.append(f.raw);
  }
  if (std::find(specials.begin(), specials.end(), piece) == specials.end()) {
    out.assign(piece_msg);
    return true;
  }
  out = std::move(rest);
  WriteVarint(out, (kPieceTypeField << 3) | 0);
  WriteVarint(out, kTypeControl);
  return true;
}

bool RetypeSpecials(std::string_view model, const std::array<std::string_view, 4>& specials, std::string& out) {
  size_t pos = 0;
  Field f;
  std::string piece;
  while (pos < model.size()) {
    if (!ReadField(model, pos, f)) return false;
    if (f.number != kModelPiecesField || f.wire_type != 2) {
      out.append(f.raw);
      continue;
    }
    if (!RetypePiece(f.payload, specials, piece)) return false;
    WriteVarint(out, (kModelPiecesField << 3) | 2);
    WriteVarint(out, piece.size());
    out.append(piece);
  }
  return true;
}

constexpr std::array<std::string_view, 4> kSpecialLiterals = {kSysToken, kUsrToken, kAsstToken, kEotToken};
constexpr std::array<std::string_view, 4> kSpecialNames = {"sys", "usr", "asst", "eot"};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(file + ": cannot read");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return Build(buffer.str(), file, /*require_markers=*/true);
}

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromModelProto(std::string_view serialized,
                                                                                         const std::string& where) {
  return Build(std::string(serialized), where, /*require_markers=*/false);
}

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Build(const std::string& serialized,
                                                                                const std::string& where,
                                                                                bool require_markers) {
  if (Status s = LoadSentencePieceRuntime(); !s.ok()) return Status::Internal(where + ": " + s.message());
  sentencepiece::SentencePieceProcessor original;
  if (auto s = original.LoadFromSerializedProto(serialized); !s.ok()) {
    return Status::InvalidArgument(where + ": not a SentencePiece model (" + s.ToString() + ")");
  }
  std::array<int32_t, 4> ids{};
  bool has_markers = true;
  for (size_t i = 0; i < kSpecialLiterals.size() && has_markers; ++i) {
    ids[i] = original.PieceToId(kSpecialLiterals[i]);
    if (ids[i] < 0 || original.IsUnknown(ids[i]) || original.IdToPiece(ids[i]) != kSpecialLiterals[i]) {
      if (require_markers) {
        return Status::InvalidArgument(where + ": missing special token " + std::string(kSpecialNames[i]) + " (" +
                                       std::string(kSpecialLiterals[i]) + ") as a single piece");
      }
      has_markers = false;
    }
  }
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (!has_markers) {
    // Every control piece is special; EncodeRendered also reads unknown pieces (llama.cpp's
    // special-token cache holds both).
    if (auto s = tok->sp_->LoadFromSerializedProto(serialized); !s.ok()) {
      return Status::Internal(where + ": reloading the SentencePiece model failed: " + s.ToString());
    }
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      const bool control = tok->sp_->IsControl(id);
      if (control) tok->special_ids_.push_back(id);
      if (control || tok->sp_->IsUnknown(id)) tok->rendered_literals_.emplace_back(tok->sp_->IdToPiece(id), id);
    }
    std::stable_sort(tok->rendered_literals_.begin(), tok->rendered_literals_.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    return tok;
  }
  std::string retyped;
  if (!RetypeSpecials(serialized, kSpecialLiterals, retyped)) {
    return Status::InvalidArgument(where + ": malformed SentencePiece model proto");
  }
  if (auto s = tok->sp_->LoadFromSerializedProto(retyped); !s.ok()) {
    return Status::Internal(where + ": reloading with control special tokens failed: " + s.ToString());
  }
  tok->special_ = {ids[0], ids[1], ids[2], ids[3]};
  for (size_t i = 0; i < kSpecialLiterals.size(); ++i) {
    tok->rendered_literals_.emplace_back(std::string(kSpecialLiterals[i]), ids[i]);
  }
  tok->special_ids_.assign(ids.begin(), ids.end());
  std::sort(tok->special_ids_.begin(), tok->special_ids_.end());
  std::stable_sort(tok->rendered_literals_.begin(), tok->rendered_literals_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  NIELS_RETURN_IF_ERROR(tok->CheckMarkersNeverEncoded(where));
  return tok;
}

// The guarantee Encode documents, checked once per load of niels_gpt's tokenizer.
Status SentencePieceTokenizer::CheckMarkersNeverEncoded(const std::string& where) const {
  const std::array<int32_t, 4> ids = {special_.sys, special_.usr, special_.asst, special_.eot};
  for (size_t i = 0; i < kSpecialLiterals.size(); ++i) {
    if (sp_->PieceToId(kSpecialLiterals[i]) != ids[i] || !sp_->IsControl(ids[i])) {
      return Status::Internal(where + ": special token " + std::string(kSpecialNames[i]) + " changed id on reload");
    }
    StatusOr<std::vector<int32_t>> literal = Encode(kSpecialLiterals[i]);
    if (!literal.ok()) return Status::Internal(where + ": " + literal.status().message());
    for (int32_t id : *literal) {
      if (IsSpecial(id)) {
        return Status::Internal(where + ": the literal of " + std::string(kSpecialNames[i]) + " encodes to a special id");
      }
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text) const {
  std::vector<int> ids;
  if (auto s = sp_->Encode(text, &ids); !s.ok()) return Status::Internal("SentencePiece: " + s.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<SentencePieceTokenizer::RenderedPart> SentencePieceTokenizer::SplitRendered(
    std::string_view text, std::span<const TextRange> plain) const {
  // Split out the literals, longest first (llama.cpp's order), each everywhere in the text that is
  // still plain.
  std::vector<RenderedPart> parts = {{0, text.size(), -1}}, next;
  for (const auto& [literal, id] : rendered_literals_) {
    next.clear();
    for (const RenderedPart& part : parts) {
      if (part.id >= 0) {
        next.push_back(part);
        continue;
      }
      const std::string_view piece = text.substr(part.begin, part.end - part.begin);
      size_t cut = 0;   // start of what is still plain in `piece`
      size_t from = 0;  // where the next search starts
      for (size_t at = piece.find(literal); at != std::string_view::npos; at = piece.find(literal, from)) {
        const size_t begin = part.begin + at;
        if (OverlapsAny(plain, begin, begin + literal.size())) {
          from = at + 1;
          continue;
        }
        if (at > cut) next.push_back({part.begin + cut, begin, -1});
        next.push_back({begin, begin + literal.size(), id});
        cut = from = at + literal.size();
      }
      if (cut < piece.size() || piece.empty()) next.push_back({part.begin + cut, part.end, -1});
    }
    parts.swap(next);
  }
  return parts;
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeRendered(std::string_view text) const {
  return EncodeRenderedKeepingText(text, {});
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeRenderedKeepingText(
    std::string_view text, std::span<const TextRange> plain) const {
  // Each plain part is encoded on its own.
  std::vector<int32_t> out;
  for (const RenderedPart& part : SplitRendered(text, plain)) {
    if (part.id >= 0) {
      out.push_back(part.id);
      continue;
    }
    StatusOr<std::vector<int32_t>> encoded = Encode(text.substr(part.begin, part.end - part.begin));
    if (!encoded.ok()) return encoded.status();
    out.insert(out.end(), encoded->begin(), encoded->end());
  }
  return out;
}

std::vector<TextRange> SentencePieceTokenizer::FindSpecialLiterals(std::string_view text) const {
  std::vector<TextRange> found;
  for (const RenderedPart& part : SplitRendered(text, {})) {
    if (part.id >= 0) found.push_back({part.begin, part.end});
  }
  return found;
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  const int32_t n = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= n || IsSpecial(id)) continue;
    kept.push_back(id);
  }
  std::string text;
  if (!sp_->Decode(kept, &text).ok()) return {};
  return text;
}

std::string SentencePieceTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return sp_->IdToPiece(id);
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return std::binary_search(special_ids_.begin(), special_ids_.end(), id);
}

bool SentencePieceTokenizer::IsTextPiece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return !sp_->IsControl(id) && !sp_->IsUnknown(id) && !sp_->IsUnused(id) && !sp_->IsByte(id);
}

TextBytes SentencePieceTokenizer::Bytes(int32_t id) const {
  TextBytes out;
  if (id < 0 || id >= vocab_size() || IsSpecial(id)) return out;
  if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsUnused(id)) return out;
  const std::string piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    // "<0xNN>": SentencePiece's spelling of a byte-fallback piece.
    unsigned value = 0;
    if (piece.size() != 6 || std::sscanf(piece.c_str(), "<0x%2X>", &value) != 1 || value > 0xFF) return out;
    out.is_text = true;
    out.bytes.assign(1, static_cast<char>(value));
    out.at_start = out.bytes;
    return out;
  }
  out.is_text = true;
  constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581
  for (size_t pos = 0; pos < piece.size();) {
    if (piece.compare(pos, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      out.bytes.push_back(' ');
      pos += kSpaceSymbol.size();
    } else {
      out.bytes.push_back(piece[pos++]);
    }
  }
  // The start rule is SentencePiece's own: the id decoded alone.
  const std::vector<int> one = {id};
  if (!sp_->Decode(one, &out.at_start).ok()) out.at_start = out.bytes;
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

}  // namespace niels::daemon::text
