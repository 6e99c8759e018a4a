#include "daemon/loaders/gguf_tokenizer.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "daemon/loaders/gguf_sentencepiece.h"

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using formats::GgufFile;
using text::BpeSpec;
using text::TokenType;

// Control tokens that end a turn or a text in the chat formats of the supported families.
constexpr std::string_view kEndMarkers[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>",
                                            "<|endoftext|>"};

std::string Where(const GgufFile& file, std::string_view key) {
  return fmt::format("{}: key \"{}\"", file.path().string(), key);
}


// An optional token id key, which must be < vocab_size.
StatusOr<std::optional<int32_t>> TokenId(const GgufFile& file, std::string_view key, int64_t vocab_size) {
  auto id = formats::OptionalKey(file.GetUint(key));
  if (!id.ok()) return id.status();
  if (!*id) return std::optional<int32_t>();
  if (**id >= static_cast<uint64_t>(vocab_size)) {
    return Status::InvalidArgument(fmt::format("{} = {} is not a token id (the vocabulary has {})", Where(file, key),
                                               **id, vocab_size));
  }
  return std::optional<int32_t>(static_cast<int32_t>(**id));
}

enum class Vocabulary { kBpe, kSentencePiece };

// tokenizer.ggml.model: "gpt2" or "llama"; everything else refused.
StatusOr<Vocabulary> ReadModelKind(const GgufFile& file) {
  auto model = formats::RequiredKey(file.GetString("tokenizer.ggml.model"), file, "tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model == "gpt2") return Vocabulary::kBpe;
  if (*model == "llama") return Vocabulary::kSentencePiece;
  if (*model == "t5") {
    return Status::InvalidArgument(fmt::format(
        "{} = \"t5\": SentencePiece unigram vocabularies are not supported from GGUF; nielsd runs \"gpt2\" "
        "(byte-level BPE) and \"llama\" (SentencePiece BPE) (a niels_gpt model exported by niels-export: load its "
        "niels model directory instead)",
        Where(file, "tokenizer.ggml.model")));
  }
  return Status::InvalidArgument(
      fmt::format("{} = \"{}\" is not supported (nielsd runs \"gpt2\", byte-level BPE, and \"llama\", SentencePiece "
                  "BPE)",
                  Where(file, "tokenizer.ggml.model"), *model));
}

// tokenizer.ggml.pre -> the pre-tokenizer of a byte-level BPE vocabulary.
Status ReadPreTokenizer(const GgufFile& file, BpeSpec* spec, std::string* pre_name) {
  auto pre = formats::RequiredKey(file.GetString("tokenizer.ggml.pre"), file, "tokenizer.ggml.pre");
  if (!pre.ok()) return pre.status();
  auto setup = text::PreTokenizerForGgufName(*pre);
  if (!setup.ok()) {
    return Status::InvalidArgument(fmt::format("{}: {}", file.path().string(), setup.status().message()));
  }
  spec->pre_tokenizer = std::move(setup).value();
  *pre_name = std::string(*pre);
  spec->ignore_merges = *pre_name == "llama-bpe" || *pre_name == "llama3" || *pre_name == "llama-v3";
  return Status::Ok();
}

// tokenizer.ggml.tokens, as many as the embedding has rows.
StatusOr<std::vector<std::string_view>> ReadTokens(const GgufFile& file, int64_t vocab_size) {
  auto tokens = formats::RequiredKey(file.GetStringArray("tokenizer.ggml.tokens"), file, "tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (static_cast<int64_t>(tokens->size()) != vocab_size) {
    return Status::InvalidArgument(fmt::format("{} holds {} tokens, but token_embd.weight has {} rows",
                                               Where(file, "tokenizer.ggml.tokens"), tokens->size(), vocab_size));
  }
  return tokens;
}

Status ReadBpeVocabulary(const GgufFile& file, const std::vector<std::string_view>& tokens, BpeSpec* spec) {
  auto types = formats::OptionalKey(file.GetIntArray("tokenizer.ggml.token_type", tokens.size()));
  if (!types.ok()) return types.status();
  if (*types && (*types)->size() != tokens.size()) {
    return Status::InvalidArgument(fmt::format("{} has {} entries for {} tokens", Where(file, "tokenizer.ggml.token_type"),
                                               (*types)->size(), tokens.size()));
  }
  spec->pieces.reserve(tokens.size());
  spec->types.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    TokenType type = TokenType::kNormal;
    if (*types) {
      const int64_t value = (**types)[i];
      const auto known = value >= 0 && value <= 255 ? text::TokenTypeFromGguf(static_cast<int32_t>(value)) : std::nullopt;
      if (!known) {
        return Status::InvalidArgument(
            fmt::format("{}[{}] = {} is not a token type (1..6)", Where(file, "tokenizer.ggml.token_type"), i, value));
      }
      type = *known;
    }
    spec->types.push_back(type);
    spec->pieces.emplace_back(type == TokenType::kUnused ? std::string_view() : tokens[i]);
  }
  auto merges = formats::RequiredKey(file.GetStringArray("tokenizer.ggml.merges"), file, "tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  spec->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    auto merge = text::SplitMergeLine((*merges)[i], i);
    if (!merge.ok()) {
      return Status::InvalidArgument(fmt::format("{}: {}", Where(file, "tokenizer.ggml.merges"), merge.status().message()));
    }
    spec->merges.push_back(std::move(merge).value());
  }
  return Status::Ok();
}

// Special ids, add_bos (`default_add_bos` when the key is absent), the chat template and the stop
// ids, for a vocabulary of `pieces` and `types`.
Status ReadSpecials(const GgufFile& file, const std::vector<std::string>& pieces, const std::vector<TokenType>& types,
                    bool default_add_bos, GgufTokenizer* out) {
  const int64_t vocab_size = static_cast<int64_t>(pieces.size());
  text::SpecialTokenIds& special = out->special;
  std::vector<int32_t> stops;
  for (std::string_view key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                               "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id",
                               "tokenizer.ggml.eom_token_id"}) {
    auto id = TokenId(file, key, vocab_size);
    if (!id.ok()) return id.status();
    if (!*id) continue;
    if (key == "tokenizer.ggml.bos_token_id") special.bos = **id;
    if (key == "tokenizer.ggml.eos_token_id") special.eos = **id;
    if (key == "tokenizer.ggml.padding_token_id") special.pad = **id;
    if (key != "tokenizer.ggml.bos_token_id" && key != "tokenizer.ggml.padding_token_id") stops.push_back(**id);
  }
  auto add_bos = formats::OptionalKey(file.GetBool("tokenizer.ggml.add_bos_token"));
  if (!add_bos.ok()) return add_bos.status();
  special.add_bos = add_bos->value_or(default_add_bos);
  auto chat_template = formats::OptionalKey(file.GetString("tokenizer.chat_template"));
  if (!chat_template.ok()) return chat_template.status();
  if (*chat_template) out->chat_template = std::string(**chat_template);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (types[id] != TokenType::kControl) continue;
    for (std::string_view marker : kEndMarkers) {
      if (pieces[id] == marker) stops.push_back(static_cast<int32_t>(id));
    }
  }
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  if (stops.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: no end-of-sequence id (tokenizer.ggml.eos_token_id or eot_token_id): nielsd would not know where a reply "
        "ends",
        file.path().string()));
  }
  out->stop_ids = std::move(stops);
  return Status::Ok();
}

}  // namespace

StatusOr<GgufTokenizer> ReadGgufTokenizer(const GgufFile& file, int64_t vocab_size) {
  auto kind = ReadModelKind(file);
  if (!kind.ok()) return kind.status();
  auto tokens = ReadTokens(file, vocab_size);
  if (!tokens.ok()) return tokens.status();
  GgufTokenizer out;
  if (*kind == Vocabulary::kSentencePiece) {
    auto vocabulary = ReadGgufSentencePiece(file, *tokens);
    if (!vocabulary.ok()) return vocabulary.status();
    out.sentencepiece = std::move(vocabulary).value();
    // llama.cpp adds BOS for this vocabulary unless the file says otherwise.
    NIELS_RETURN_IF_ERROR(
        ReadSpecials(file, out.sentencepiece->pieces, out.sentencepiece->types, /*default_add_bos=*/true, &out));
    return out;
  }
  BpeSpec spec;
  std::string pre;
  NIELS_RETURN_IF_ERROR(ReadPreTokenizer(file, &spec, &pre));
  NIELS_RETURN_IF_ERROR(ReadBpeVocabulary(file, *tokens, &spec));
  NIELS_RETURN_IF_ERROR(
      ReadSpecials(file, spec.pieces, spec.types, pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3", &out));
  spec.special = out.special;
  spec.chat_template = out.chat_template;
  out.bpe = std::move(spec);
  return out;
}

}  // namespace niels::daemon::loaders
