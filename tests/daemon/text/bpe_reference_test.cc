// The byte-level BPE tokenizers against a reference encoder, on a generated corpus.
//
// Once per run: tests/daemon/text/reference/make_bpe_corpus.py writes the corpus (over 11,000
// cases: prose, code, many scripts, emoji, digit runs, whitespace runs, contractions, special-token
// literals, NFD text, invalid UTF-8, long lines), and reference/encode_reference.mjs encodes and
// decodes every case with @lenml/tokenizers (transformers.js) and the real tokenizer.json of each
// model. Then, per model, every case must give exactly the reference's ids with special tokens
// parsed and with them encoded as text, Decode must give the reference's text (with and without
// skipping special tokens), and Decode(Encode(x)) must give x back wherever the tokenizer allows:
// x valid UTF-8 and unchanged by the model's normalizer (else the reference's round trip).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/text/pre_tokenizer.h"
#include "daemon/text/utf8_repair.h"
#include "tests/daemon/text/reference_tokenizers.h"
#include "tests/support/daemon_process.h"
#include "tests/support/sanitizer.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::text {
namespace {
namespace bpe_reference_test {  // this file's own names: the suite compiles as one unity unit

using testing::kReferenceTokenizers;

std::string DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// A readable, bounded rendering of a test case for failure messages.
std::string Escape(std::string_view bytes) {
  std::string out;
  for (char c : bytes.substr(0, 160)) {
    const auto b = static_cast<uint8_t>(c);
    if (b == '\n') out += "\\n";
    else if (b == '\r') out += "\\r";
    else if (b == '\t') out += "\\t";
    else if (b < 0x20 || b == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", b);
      out += hex;
    }
    else out.push_back(c);
  }
  if (bytes.size() > 160) out += "...(" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  if (ids.size() > 40) out += " ...(" + std::to_string(ids.size()) + " ids)";
  return out;
}

// The whole corpus (over 11,000 cases) in the normal build; every fourth case under a sanitizer
// (tests/support/sanitizer.h).
constexpr int kCorpusEvery = niels::testing::UnlessSanitized(1, 4);

// The corpus and the reference's output, made once for all tokenizers.
struct ReferenceRun {
  std::unique_ptr<niels::testing::TempDir> dir;
  std::vector<std::string> cases;
  std::string error;  // why the reference could not be run (every test then fails with it)
};

// Generates the corpus and runs the reference; on failure, run->error says why.
std::unique_ptr<ReferenceRun> MakeReferenceRun() {
  auto r = std::make_unique<ReferenceRun>();
  if (!std::filesystem::exists(testing::ReferenceTokenizerDir("qwen3") / "tokenizer.json")) {
    r->error = testing::MissingReferenceMessage();
    return r;
  }
  r->dir = std::make_unique<niels::testing::TempDir>("niels_bpe_ref_");
  const std::string script_dir = std::string(NIELS_SOURCE_DIR) + "/tests/daemon/text/reference/";
  const std::string corpus = (*r->dir / "corpus.b64").string();
  const auto made = niels::testing::RunProcess(
      {"python3", script_dir + "make_bpe_corpus.py", corpus, "--every", std::to_string(kCorpusEvery)});
  if (made.exit_code != 0) {
    r->error = "make_bpe_corpus.py failed: " + made.err;
    return r;
  }
  std::vector<std::string> argv{"node", script_dir + "encode_reference.mjs", testing::ReferenceNpmDir().string(),
                                corpus, r->dir->path().string()};
  for (const char* name : kReferenceTokenizers) argv.emplace_back(name);
  const auto encoded = niels::testing::RunProcess(argv, "", {}, std::chrono::minutes(10));
  if (encoded.exit_code != 0) {
    r->error = "encode_reference.mjs failed (" + std::to_string(encoded.exit_code) + "): " + encoded.err.substr(0, 2000);
    return r;
  }
  std::ifstream in(corpus);
  for (std::string line; std::getline(in, line);) r->cases.push_back(DecodeBase64(line));
  return r;
}

struct Tally {
  size_t special = 0, plain = 0, decoded = 0, decoded_skip = 0, round_trip_exact = 0, round_trip_reference = 0;
  size_t failures = 0;
};

class BpeReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The corpus and the reference's output are made once for all tokenizers (the reference takes
  // some 35 s for all five) and removed after the last.
  static void SetUpTestSuite() { run_ = MakeReferenceRun().release(); }
  static void TearDownTestSuite() {
    delete run_;
    run_ = nullptr;
  }
  static inline ReferenceRun* run_ = nullptr;

  void Fail(Tally* tally, size_t index, const std::string& what) {
    if (++tally->failures <= 12) ADD_FAILURE() << GetParam() << " case " << index << ": " << what;
  }
};

TEST_P(BpeReferenceTest, EncodesAndDecodesLikeTheReference) {
  const ReferenceRun& run = *run_;
  ASSERT_TRUE(run.error.empty()) << run.error;
  ASSERT_GE(run.cases.size(), 10000u / kCorpusEvery);
  const auto tokenizer = testing::LoadReferenceTokenizer(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const bool nfc = GetParam().rfind("qwen", 0) == 0;

  std::ifstream in(run.dir->path() / (GetParam() + ".jsonl"));
  Tally tally;
  size_t index = 0;
  for (std::string line; std::getline(in, line); ++index) {
    ASSERT_LT(index, run.cases.size());
    const std::string& text = run.cases[index];
    const auto reference = nlohmann::json::parse(line);
    const auto special = tokenizer->Encode(text, /*parse_special=*/true);
    const auto plain = tokenizer->Encode(text, /*parse_special=*/false);
    ASSERT_TRUE(special.ok() && plain.ok()) << special.status().ToString() << plain.status().ToString();
    const auto want_special = reference["special"].get<std::vector<int32_t>>();
    const auto want_plain = reference["plain"].get<std::vector<int32_t>>();
    if (*special == want_special) ++tally.special;
    else Fail(&tally, index, "parse_special ids of \"" + Escape(text) + "\"\n  got  " + Ids(*special) + "\n  want " + Ids(want_special));
    if (*plain == want_plain) ++tally.plain;
    else Fail(&tally, index, "plain ids of \"" + Escape(text) + "\"\n  got  " + Ids(*plain) + "\n  want " + Ids(want_plain));

    const std::string decoded = tokenizer->Decode(want_special, /*skip_special=*/false);
    if (decoded == reference["decoded"].get<std::string>()) ++tally.decoded;
    else Fail(&tally, index, "decode of " + Ids(want_special) + "\n  got  \"" + Escape(decoded) + "\"");
    const std::string skipped = tokenizer->Decode(want_special, /*skip_special=*/true);
    if (skipped == reference["decoded_skip"].get<std::string>()) ++tally.decoded_skip;
    else Fail(&tally, index, "decode (skip special) of " + Ids(want_special) + "\n  got  \"" + Escape(skipped) + "\"");

    // Round trip: the text itself where the tokenizer keeps it; the reference's round trip where
    // UTF-8 repair or NFC change it.
    std::string normalized;
    if (nfc && IsValidUtf8(text)) AppendNfc(text, &normalized);
    const bool kept = IsValidUtf8(text) && (!nfc || normalized == text);
    const std::string round_trip = tokenizer->Decode(*plain, false);
    if (kept) {
      if (round_trip == text && tokenizer->Decode(*special, false) == text) ++tally.round_trip_exact;
      else Fail(&tally, index, "round trip of \"" + Escape(text) + "\" gave \"" + Escape(round_trip) + "\"");
    } else {
      if (tokenizer->Decode(*special, false) == reference["decoded"].get<std::string>()) ++tally.round_trip_reference;
      else Fail(&tally, index, "round trip of \"" + Escape(text) + "\" differs from the reference's");
    }
  }
  EXPECT_EQ(index, run.cases.size()) << "the reference wrote fewer lines than the corpus has";
  EXPECT_EQ(tally.failures, 0u);
  std::cout << GetParam() << ": " << index << " cases; ids equal with special parsing " << tally.special
            << ", as text " << tally.plain << "; decode equal " << tally.decoded << ", skipping special "
            << tally.decoded_skip << "; round trip exact " << tally.round_trip_exact
            << ", equal to the reference's where repair/NFC change the text " << tally.round_trip_reference
            << std::endl;
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, BpeReferenceTest,
                         ::testing::ValuesIn(std::vector<std::string>(std::begin(kReferenceTokenizers),
                                                                      std::end(kReferenceTokenizers))),
                         [](const auto& info) { return info.param; });

}  // namespace bpe_reference_test
}  // namespace
}  // namespace niels::daemon::text
