#pragma once
// SentencePieceTokenizer: niels_gpt's tokenizer, a SentencePiece model with the four niels_gpt
// special tokens (docs/ARCHITECTURE.md, "Tokenizers, chat templates, text and sampling").
// No libtorch. Immutable after Load(); const methods are safe from any thread.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/text/tokenizer.h"

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

class SentencePieceTokenizer final : public Tokenizer {
 public:
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  // Loads tokenizer.model. NOT_FOUND if unreadable; INVALID_ARGUMENT (naming the file) if it is not a
  // SentencePiece model or lacks one of the four special tokens as a single piece.
  static common::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::filesystem::path& path);

  // Tokenizer. Encode: the result never contains sys/usr/asst/eot (the four markers are the only
  // special ids). EncodeRendered: the four literals become their ids, the text between them is
  // encoded separately. Errors: INTERNAL when SentencePiece fails.
  int32_t vocab_size() const override;
  common::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  common::StatusOr<std::vector<int32_t>> EncodeRendered(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::string Piece(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  // Also false for control, unknown, unused and byte-fallback pieces: after an ordinary piece
  // SentencePiece's decoder holds no partial bytes.
  bool IsTextPiece(int32_t id) const override;
  TextBytes Bytes(int32_t id) const override;

  // niels_gpt's four markers.
  const SpecialTokens& special() const { return special_; }

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  SpecialTokens special_;
};

}  // namespace niels::daemon::text
