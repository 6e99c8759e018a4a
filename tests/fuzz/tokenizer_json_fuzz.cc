// Fuzz target: the byte-level BPE tokenizer (daemon/text/): the tokenizer.json reader and the
// encoder and decoder on fuzzed text.
//
// Input: byte 0 selects the mode.
//   even: bytes 1-2 are a little-endian length L; the next L bytes are a tokenizer.json, the next
//         (up to 512) bytes text. The file is parsed (BpeSpecFromTokenizerJson) and, if accepted,
//         built into a tokenizer (BpeTokenizer::Create) that encodes and decodes the text.
//   odd:  the rest is text for one of two small built-in tokenizers (bit 1 picks Llama 3's split,
//         or Qwen's with NFC), whose added tokens use every flag (lstrip, rstrip, single_word,
//         normalized, special and not).
// Invariants: a refused file has a message; every id Encode returns is in range; Decode gives
// valid UTF-8, equal to the repaired concatenation of TokenBytes; Decode(Encode(x)) == x for valid
// UTF-8 x where the tokenizer keeps text (no normalizer, every byte spelled, no added token
// matched); encoding without special parsing never yields a special id (built-in tokenizers); and
// BpeModel's merges equal a naive O(n^2) merge (tests/daemon/text/naive_bpe.h) on every pre-token
// of up to 64 bytes.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/text/bpe_model.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/byte_level.h"
#include "daemon/text/pre_tokenizer.h"
#include "daemon/text/tokenizer_json.h"
#include "daemon/text/utf8_repair.h"
#include "tests/daemon/text/naive_bpe.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using niels::daemon::text::AddedTokenFlags;
using niels::daemon::text::BpeModel;
using niels::daemon::text::BpeSpec;
using niels::daemon::text::BpeTokenizer;
using niels::daemon::text::TokenType;

// 256 byte pieces (id = byte), merges that build a few English words, digits, 'é' and '中', and
// added tokens with every flag.
BpeSpec BuiltInSpec(bool qwen) {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    const char c = static_cast<char>(b);
    niels::daemon::text::AppendByteLevel(std::string_view(&c, 1), &piece);
    spec.pieces.push_back(piece);
    spec.types.push_back(TokenType::kNormal);
  }
  const char* merges[][2] = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"},
                             {"a", "n"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}, {"1", "1"}, {"11", "1"}, {"Ã", "©"},
                             {"ä", "¸"}, {"ä¸", "Ń"}, {"Ċ", "Ċ"}, {"'", "s"}, {"Ġa", "n"}, {"in", "g"},
                             {"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}, {"h", "e"}, {"Ġ", "Ċ"}};
  for (const auto& m : merges) {
    spec.merges.emplace_back(m[0], m[1]);
    spec.pieces.push_back(std::string(m[0]) + m[1]);
    spec.types.push_back(TokenType::kNormal);
  }
  const struct {
    const char* text;
    TokenType type;
    AddedTokenFlags flags;
  } added[] = {{"<|im_start|>", TokenType::kControl, {}},
               {"<|im_end|>", TokenType::kControl, {}},
               {"<think>", TokenType::kUserDefined, {}},
               {"[L]", TokenType::kControl, {.lstrip = true}},
               {"[R]", TokenType::kUserDefined, {.rstrip = true}},
               {"[W]", TokenType::kUserDefined, {.single_word = true}},
               {"e\xCC\x81x", TokenType::kUserDefined, {.normalized = true}},
               {"Ġspaced out", TokenType::kUserDefined, {}}};
  for (const auto& a : added) {
    const auto id = static_cast<int32_t>(spec.pieces.size());
    spec.pieces.emplace_back(a.text);
    spec.types.push_back(a.type);
    spec.added_flags.emplace_back(id, a.flags);
  }
  spec.pre_tokenizer = niels::daemon::text::PreTokenizerForGgufName(qwen ? "qwen2" : "llama-bpe").value();
  spec.ignore_merges = !qwen;
  return spec;
}

struct BuiltIn {
  BpeSpec spec;
  std::unique_ptr<BpeTokenizer> tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<niels::daemon::text::PreTokenizer> pre;
  niels::daemon::text::testing::NaiveBpe naive;

  explicit BuiltIn(bool qwen)
      : spec(BuiltInSpec(qwen)),
        tokenizer(BpeTokenizer::Create(spec).value()),
        model(BpeModel::Build(spec.pieces, spec.types, spec).value()),
        pre(niels::daemon::text::PreTokenizer::Create(spec.pre_tokenizer).value()),
        naive(spec) {}
};

bool EveryByteSpelled(const BpeTokenizer& tokenizer) {
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    const char c = static_cast<char>(b);
    niels::daemon::text::AppendByteLevel(std::string_view(&c, 1), &piece);
    if (!tokenizer.TokenId(piece)) return false;
  }
  return true;
}

// may_round_trip: the tokenizer keeps text (no normalizer, every byte spelled). strict_special:
// no special token's text is also a BPE result (true of the built-in tokenizers; a fuzzed file may
// declare a byte piece special, and then BPE yields that id as Hugging Face's would).
void CheckTokenizer(const BpeTokenizer& tokenizer, std::string_view text, bool may_round_trip, bool strict_special) {
  for (bool parse_special : {false, true}) {
    const auto ids = tokenizer.Encode(text, parse_special);
    if (!ids.ok()) {
      FUZZ_CHECK(!ids.status().message().empty());
      continue;
    }
    std::string bytes;
    bool added = false;
    for (int32_t id : *ids) {
      FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
      FUZZ_CHECK(parse_special || !strict_special || !tokenizer.IsSpecial(id));
      added |= tokenizer.IsAdded(id);
      bytes.append(tokenizer.TokenBytes(id));
    }
    const std::string decoded = tokenizer.Decode(*ids, /*skip_special=*/false);
    FUZZ_CHECK(niels::daemon::text::IsValidUtf8(decoded));
    FUZZ_CHECK(decoded == niels::daemon::text::RepairUtf8(bytes));
    if (may_round_trip && !added && niels::daemon::text::IsValidUtf8(text)) FUZZ_CHECK(decoded == text);
  }
}

// BpeModel against the naive merge on each pre-token.
void CheckMerges(const BuiltIn& built_in, std::string_view text) {
  const std::string repaired = niels::daemon::text::RepairUtf8(text);
  std::vector<std::string_view> words;
  if (!built_in.pre->Split(repaired, &words).ok()) return;
  BpeModel::Scratch scratch;
  for (std::string_view word : words) {
    if (word.size() > 64) continue;
    std::vector<int32_t> ids;
    built_in.model->Encode(word, &scratch, &ids);
    FUZZ_CHECK(ids == built_in.naive.Encode(word));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t mode = in.U8();
  if (mode & 1) {
    static const BuiltIn llama(false);
    static const BuiltIn qwen(true);
    const BuiltIn& built_in = (mode & 2) ? qwen : llama;
    const std::string_view text = in.Rest();
    CheckTokenizer(*built_in.tokenizer, text, /*may_round_trip=*/!(mode & 2), /*strict_special=*/true);
    CheckMerges(built_in, text);
    return 0;
  }
  const std::string_view json = in.Bytes(in.U16());
  // A fuzzed split pattern may backtrack up to PCRE2's match limit at every position: a short text
  // keeps such an input fast.
  const std::string_view text = in.Bytes(512);
  auto spec = niels::daemon::text::BpeSpecFromTokenizerJson(json, "tokenizer.json");
  if (!spec.ok()) {
    FUZZ_CHECK(!spec.status().message().empty());
    return 0;
  }
  const bool normalizes = spec->pre_tokenizer.normalization != niels::daemon::text::Normalization::kNone;
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) {
    FUZZ_CHECK(!tokenizer.status().message().empty());
    return 0;
  }
  CheckTokenizer(**tokenizer, text, !normalizes && EveryByteSpelled(**tokenizer), /*strict_special=*/false);
  return 0;
}
