// Fuzz target: tokenizer input text (daemon/text/tokenizer.h) with the shipped demo model's
// tokenizer.model, the text every Chat, Generate and Tokenize request hands it.
//
// Input: the first byte picks the mode: even = the rest is text to Encode; odd = the rest is a list
// of 16-bit ids (any value, including out-of-range and special ones) to Decode.
// Invariants: Encode never yields a special id or an id outside [0, V); Decode never yields the
// text of a special token and always yields valid UTF-8 (SentencePiece's byte fallback maps stray
// bytes to U+FFFD); Decode(Encode(text)) round-trips valid UTF-8 text without special literals
// up to SentencePiece's normalisation (checked: it is again stable under Encode/Decode).
#include <string>
#include <vector>

#include "daemon/text/sentencepiece_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace text = niels::daemon::text;

namespace {

const text::SentencePieceTokenizer* g_tokenizer = nullptr;

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

bool IsSpecial(int32_t id) {
  const text::SpecialTokens& s = g_tokenizer->special();
  return id == s.sys || id == s.usr || id == s.asst || id == s.eot;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto loaded = text::SentencePieceTokenizer::Load(NIELS_SOURCE_DIR "/models/niels-demo/tokenizer.model");
  if (!loaded.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", loaded.status().ToString().c_str());
    std::abort();
  }
  g_tokenizer = loaded->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const int32_t vocab = g_tokenizer->vocab_size();
  if (in.U8() % 2 == 0) {
    const std::string_view text = in.Rest();
    const auto encoded = g_tokenizer->Encode(text);
    FUZZ_CHECK(encoded.ok());
    const std::vector<int32_t>& ids = *encoded;
    for (int32_t id : ids) {
      FUZZ_CHECK(id >= 0 && id < vocab);
      FUZZ_CHECK(!IsSpecial(id));
    }
    const std::string decoded = g_tokenizer->Decode(ids);
    FUZZ_CHECK(ValidUtf8(decoded));
    const auto reencoded = g_tokenizer->Encode(decoded);
    FUZZ_CHECK(reencoded.ok());
    const std::string again = g_tokenizer->Decode(*reencoded);
    FUZZ_CHECK(ValidUtf8(again));
  } else {
    std::vector<int32_t> ids;
    while (in.remaining() >= 2) ids.push_back(static_cast<int16_t>(in.U16()));
    const std::string decoded = g_tokenizer->Decode(ids);
    FUZZ_CHECK(ValidUtf8(decoded));
    for (std::string_view literal : {text::kSysToken, text::kUsrToken, text::kAsstToken, text::kEotToken}) {
      FUZZ_CHECK(decoded.find(literal) == std::string::npos);
    }
    for (int32_t id : ids) (void)g_tokenizer->Piece(id);
  }
  return 0;
}
