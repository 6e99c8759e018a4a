// Fuzz target: the incremental frame reader (common/frame.h) on arbitrary bytes cut at arbitrary
// points, as a socket delivers them.
//
// Input: 2 bytes max_frame_bytes - 1 (so 1..65536), 1 byte split seed, then the byte stream.
// Invariants: the frames and the final state (need more / error) are the same whether the stream
// arrives in one piece or in random chunks; no frame exceeds the limit; the decoder never buffers
// more than one partial frame plus the last chunk; a frame that parses as a Request survives a
// serialize/parse round trip through EncodeFrame.
#include <string>
#include <vector>

#include "common/frame.h"
#include "niels/v1/nielsd.pb.h"
#include "tests/fuzz/fuzz_util.h"

using niels::common::FrameDecoder;

namespace {

struct Decoded {
  std::vector<std::string> frames;
  FrameDecoder::Result last = FrameDecoder::Result::kNeedMore;
};

void Drain(FrameDecoder& decoder, Decoded& out, size_t max_frame) {
  std::string payload;
  for (;;) {
    const FrameDecoder::Result r = decoder.Next(&payload);
    out.last = r;
    if (r != FrameDecoder::Result::kFrame) return;
    FUZZ_CHECK(payload.size() <= max_frame);
    out.frames.push_back(payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const size_t max_frame = size_t{in.U16()} + 1;
  niels::fuzz::Rng rng(in.U8());
  const std::string_view stream = in.Rest();

  Decoded whole;
  FrameDecoder one(max_frame);
  one.Feed(stream);
  Drain(one, whole, max_frame);

  Decoded split;
  FrameDecoder chunked(max_frame);
  size_t pos = 0;
  while (pos < stream.size() && split.last != FrameDecoder::Result::kError) {
    const size_t n = std::min<size_t>(stream.size() - pos, rng.Between(1, rng.Next() % 4 == 0 ? 4096 : 7));
    chunked.Feed(stream.substr(pos, n));
    pos += n;
    Drain(chunked, split, max_frame);
    // Bounded buffering: at most one partial frame (prefix + payload) plus the chunk just fed.
    FUZZ_CHECK(chunked.buffered_bytes() <= max_frame + 5 + n);
  }
  FUZZ_CHECK(split.frames == whole.frames);
  FUZZ_CHECK(split.last == whole.last);
  FUZZ_CHECK(chunked.Finish().ok() == one.Finish().ok());
  if (whole.last == FrameDecoder::Result::kError) FUZZ_CHECK(!one.error().ok());

  for (const std::string& frame : whole.frames) {
    niels::v1::Request request;
    if (!niels::common::ParseFrame(frame, &request).ok()) continue;
    const std::string encoded = niels::common::EncodeFrame(request);
    FrameDecoder again(encoded.size());
    again.Feed(encoded);
    std::string payload;
    FUZZ_CHECK(again.Next(&payload) == FrameDecoder::Result::kFrame);
    niels::v1::Request reparsed;
    FUZZ_CHECK(niels::common::ParseFrame(payload, &reparsed).ok());
    FUZZ_CHECK(reparsed.SerializeAsString() == request.SerializeAsString());
  }
  return 0;
}
