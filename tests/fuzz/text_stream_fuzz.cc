// Fuzz target: the UTF-8 stream assembly of streamed replies (daemon/text/text_stream.h) with the
// shipped demo model's tokenizer, and CompleteUtf8Prefix on raw bytes.
//
// Input: 1 mode byte. Even: the rest is a list of (16-bit id, flags) triples fed to a TextStream
// as a generation does: without flush, ending with a flushing Add of eot. (A flush in the middle
// breaks prefix stability by contract: a lone lead byte flushed as U+FFFD cannot become the
// character later bytes complete. The engine flushes only the last token; the first campaign's
// crash input, regressions/mid_stream_flush, is that case and now only checks the pieces.) Odd: the rest is raw text for
// CompleteUtf8Prefix.
// Invariants: every piece handed out extends the text so far and is valid UTF-8; everything handed
// out, after the final flush, is exactly the decoding of all ids (what the final reply says), so
// a streaming client sees the same text as a non-streaming one. CompleteUtf8Prefix returns a
// prefix without a trailing incomplete sequence or U+FFFD.
#include <string>
#include <vector>

#include "daemon/text/text_stream.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace text = niels::daemon::text;
using niels::daemon::text::CompleteUtf8Prefix;
using niels::daemon::text::TextStream;

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

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto loaded = text::SentencePieceTokenizer::Load(NIELS_SOURCE_DIR "/models/niels-demo/tokenizer.model");
  if (!loaded.ok()) {
    std::fprintf(stderr, "text_stream_fuzz: %s\n", loaded.status().ToString().c_str());
    std::abort();
  }
  g_tokenizer = loaded->release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  if (in.U8() % 2 == 1) {
    const std::string_view text = in.Rest();
    const std::string_view prefix = CompleteUtf8Prefix(text);
    FUZZ_CHECK(text.starts_with(prefix));
    FUZZ_CHECK(!prefix.ends_with("\xEF\xBF\xBD"));
    if (ValidUtf8(text)) FUZZ_CHECK(ValidUtf8(prefix));
    return 0;
  }
  const int32_t vocab = g_tokenizer->vocab_size();
  TextStream stream(*g_tokenizer);
  std::vector<int32_t> ids;
  std::string handed_out;
  while (in.remaining() >= 3 && ids.size() < 512) {
    // Mostly in-range ids (the sampler only yields those), sometimes anything.
    const uint16_t raw = in.U16();
    const uint8_t flags = in.U8();
    const int32_t id = (flags & 2) ? static_cast<int16_t>(raw) : raw % vocab;
    ids.push_back(id);
    const std::string piece = stream.Add(id, /*flush=*/false);
    handed_out += piece;
    FUZZ_CHECK(handed_out == stream.sent());
    // Pieces of valid UTF-8 concatenate to valid UTF-8, so checking each new piece checks
    // everything handed out, in O(n) per input instead of O(n^2).
    FUZZ_CHECK(ValidUtf8(piece));
  }
  ids.push_back(g_tokenizer->special().eot);
  handed_out += stream.Add(g_tokenizer->special().eot, /*flush=*/true);
  FUZZ_CHECK(handed_out == stream.sent());
  const std::string decoded = g_tokenizer->Decode(ids);
  if (handed_out != decoded) {
    std::string shown;
    for (int32_t id : ids) shown += std::to_string(id) + " ";
    std::fprintf(stderr, "ids %s\nstreamed \"%s\"\ndecoded  \"%s\"\n", shown.c_str(), handed_out.c_str(),
                 decoded.c_str());
  }
  FUZZ_CHECK(handed_out == decoded);
  return 0;
}
