#pragma once
// Tokenizer: a SentencePiece model with the four niels_gpt special tokens (docs/ARCHITECTURE.md
// "Tokenizer, chat template and sampling").
// No libtorch. Immutable after Load(); const methods are safe from any thread.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sentencepiece { class SentencePieceProcessor; }

namespace niels::daemon::text {

// The special-token literals. Each is exactly one piece of the tokenizer.
inline constexpr std::string_view kSysToken = "<|ngpt_sys_84a5023f67d74cf29cc4001becde983c|>";
inline constexpr std::string_view kUsrToken = "<|ngpt_usr_84a5023f67d74cf29cc4001becde983c|>";
inline constexpr std::string_view kAsstToken = "<|ngpt_asst_84a5023f67d74cf29cc4001becde983c|>";
inline constexpr std::string_view kEotToken = "<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>";

struct SpecialTokens {
  int32_t sys = -1;
  int32_t usr = -1;
  int32_t asst = -1;
  int32_t eot = -1;
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Loads tokenizer.model. NOT_FOUND if unreadable; INVALID_ARGUMENT (naming the file) if it is not a
  // SentencePiece model or lacks one of the four special tokens as a single piece.
  static common::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::filesystem::path& path);

  // Encodes plain text. A special-token literal inside `text` is encoded as ordinary text, never
  // as its special id: the result never contains sys/usr/asst/eot.
  std::vector<int32_t> Encode(std::string_view text) const;
  // Decodes ids to text; special ids decode to nothing. Out-of-range ids are skipped.
  std::string Decode(std::span<const int32_t> ids) const;
  // The piece string of one id ("" when out of range).
  std::string Piece(int32_t id) const;
  // Whether `id` is an ordinary text piece: in range, and not a special, control, unknown, unused or
  // byte-fallback piece. After such a piece SentencePiece's decoder holds no partial bytes, so the
  // text of the ids that follow it does not depend on the ids before it once some text exists
  // (TextStream relies on this).
  bool IsTextPiece(int32_t id) const;

  const SpecialTokens& special() const { return special_; }
  int32_t vocab_size() const;

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  SpecialTokens special_;
};

}  // namespace niels::daemon::text
