#pragma once
// SentencePieceTokenizer: a SentencePiece model (docs/ARCHITECTURE.md, "Tokenizers, chat templates,
// text and sampling"): niels_gpt's tokenizer.model with its four special tokens, or the SentencePiece
// vocabulary of a GGUF file (llama.cpp's "llama" vocabulary: Llama 2, Mistral, a niels-export GGUF)
// as a ModelProto (sentencepiece_proto.h).
// No libtorch. Immutable once made; const methods are safe from any thread.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

  // Loads niels_gpt's tokenizer.model. NOT_FOUND if unreadable; INVALID_ARGUMENT (naming the file) if
  // it is not a SentencePiece model or lacks one of the four special tokens as a single piece.
  static common::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::filesystem::path& path);

  // A tokenizer from a serialized ModelProto; `where` names its source in errors. With niels_gpt's
  // four markers among its pieces it is niels_gpt's tokenizer, exactly as Load makes it (the markers
  // are the special ids, special() names them). Otherwise every CONTROL piece is special (<s>, </s>,
  // [INST]...), special() is all -1, and EncodeRendered also reads UNKNOWN pieces' literals (<unk>),
  // as llama.cpp does with special tokens parsed. INVALID_ARGUMENT naming `where` with SentencePiece's
  // reason when it refuses the proto; INTERNAL when SentencePiece cannot be loaded.
  static common::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromModelProto(std::string_view serialized,
                                                                                   const std::string& where);

  // Tokenizer. Encode: the result never contains a special id (a control piece never comes from
  // text). EncodeRendered: the special literals become their ids (a longer literal before a shorter
  // one, then left to right, as llama.cpp splits a text), the text between them is encoded
  // separately. Errors: INTERNAL when SentencePiece fails.
  int32_t vocab_size() const override;
  common::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override;
  common::StatusOr<std::vector<int32_t>> EncodeRendered(std::string_view text) const override;
  // EncodeRendered's split, where an occurrence of a literal that overlaps `plain` is not split out
  // (the search goes on after its first byte), so it is encoded with the plain part around it.
  common::StatusOr<std::vector<int32_t>> EncodeRenderedKeepingText(std::string_view text,
                                                                   std::span<const TextRange> plain) const override;
  // The literals EncodeRendered's split takes out (their ranges, in text order).
  std::vector<TextRange> FindSpecialLiterals(std::string_view text) const override;
  std::string Decode(std::span<const int32_t> ids) const override;
  std::string Piece(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  // Also false for control, unknown, unused and byte-fallback pieces: after an ordinary piece
  // SentencePiece's decoder holds no partial bytes.
  bool IsTextPiece(int32_t id) const override;
  TextBytes Bytes(int32_t id) const override;

  // niels_gpt's four markers (all -1 for a tokenizer without them).
  const SpecialTokens& special() const { return special_; }

 private:
  SentencePieceTokenizer();
  // Builds from `serialized`; `require_markers`: refuse a model without niels_gpt's four markers.
  static common::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Build(const std::string& serialized,
                                                                         const std::string& where,
                                                                         bool require_markers);
  common::Status CheckMarkersNeverEncoded(const std::string& where) const;
  // A piece of a rendered text: plain text, or a literal read as `id`; [begin, end) in the text.
  struct RenderedPart {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;  // -1: plain text
  };
  // EncodeRendered's split of `text` into parts, in text order (literals overlapping `plain` stay
  // in the plain parts).
  std::vector<RenderedPart> SplitRendered(std::string_view text, std::span<const TextRange> plain) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  SpecialTokens special_;
  std::vector<int32_t> special_ids_;  // ascending: what IsSpecial names and Decode drops
  // The literals EncodeRendered reads as ids, longest first (ties: lower id first).
  std::vector<std::pair<std::string, int32_t>> rendered_literals_;
};

}  // namespace niels::daemon::text
