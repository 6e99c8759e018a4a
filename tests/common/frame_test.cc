#include "common/frame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "niels/v1/nielsd.pb.h"

namespace niels::common {
namespace {

// Independent reference encoder for the tests: base-128 varint, low group first.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}

std::string Frame(const std::string& payload) { return Varint(payload.size()) + payload; }

struct FeedCase {
  std::string name;
  std::vector<std::string> chunks;     // fed one after the other, draining frames after each
  size_t max_frame_bytes;
  std::vector<std::string> expected;   // payloads, in order
  StatusCode error;                    // kOk: no decode error expected
  StatusCode finish;                   // Finish() result code at the end
};

std::vector<std::string> Bytes(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

std::vector<FeedCase> FeedCases() {
  const std::string a = "hello", b(300, 'x'), c;  // c: an empty payload is a valid frame
  const std::string stream = Frame(a) + Frame(b) + Frame(c) + Frame("z");
  return {
      {"OneFrameOneRead", {Frame(a)}, 1024, {a}, StatusCode::kOk, StatusCode::kOk},
      {"OneFrameByteByByte", Bytes(Frame(b)), 1024, {b}, StatusCode::kOk, StatusCode::kOk},
      {"SeveralFramesOneRead", {stream}, 1024, {a, b, c, "z"}, StatusCode::kOk, StatusCode::kOk},
      {"SeveralFramesByteByByte", Bytes(stream), 1024, {a, b, c, "z"}, StatusCode::kOk, StatusCode::kOk},
      {"SplitInsideVarint", {stream.substr(0, 7), stream.substr(7)}, 1024, {a, b, c, "z"},
       StatusCode::kOk, StatusCode::kOk},
      {"ExactlyMaxSize", {Frame(b)}, 300, {b}, StatusCode::kOk, StatusCode::kOk},
      {"OneOverMax", {Frame(b)}, 299, {}, StatusCode::kResourceExhausted, StatusCode::kResourceExhausted},
      {"FrameBeforeOversizeIsDelivered", {Frame(a) + Varint(1u << 30) + "abc"}, 1024, {a},
       StatusCode::kResourceExhausted, StatusCode::kResourceExhausted},
      {"TruncatedPayloadAtEof", {Frame(a) + Frame(b).substr(0, 100)}, 1024, {a}, StatusCode::kOk,
       StatusCode::kInvalidArgument},
      {"TruncatedVarintAtEof", {std::string("\x80", 1)}, 1024, {}, StatusCode::kOk,
       StatusCode::kInvalidArgument},
      {"SixByteVarint", {std::string("\x81\x80\x80\x80\x80\x00", 6)}, 1024, {},
       StatusCode::kInvalidArgument, StatusCode::kInvalidArgument},
      {"FiveByteVarintOver32Bits", {std::string("\x80\x80\x80\x80\x10", 5)}, 1024, {},
       StatusCode::kInvalidArgument, StatusCode::kInvalidArgument},
      {"FiveByteVarintWithin32BitsIsOversize", {std::string("\xff\xff\xff\xff\x0f", 5)}, 1024, {},
       StatusCode::kResourceExhausted, StatusCode::kResourceExhausted},
      {"NonMinimalVarintAccepted", {std::string("\x85\x00", 2) + a}, 1024, {a}, StatusCode::kOk,
       StatusCode::kOk},
  };
}

class FrameDecoderFeedTest : public testing::TestWithParam<FeedCase> {};

TEST_P(FrameDecoderFeedTest, DecodesExpectedFrames) {
  const FeedCase& tc = GetParam();
  FrameDecoder decoder(tc.max_frame_bytes);
  std::vector<std::string> got;
  bool errored = false;
  for (const std::string& chunk : tc.chunks) {
    decoder.Feed(chunk);
    std::string payload;
    FrameDecoder::Result r;
    while ((r = decoder.Next(&payload)) == FrameDecoder::Result::kFrame) got.push_back(payload);
    if (r == FrameDecoder::Result::kError) errored = true;
  }
  EXPECT_EQ(got, tc.expected);
  EXPECT_EQ(errored, tc.error != StatusCode::kOk);
  EXPECT_EQ(decoder.error().code(), tc.error) << decoder.error().ToString();
  EXPECT_EQ(decoder.Finish().code(), tc.finish) << decoder.Finish().ToString();
}

INSTANTIATE_TEST_SUITE_P(Cases, FrameDecoderFeedTest, testing::ValuesIn(FeedCases()),
                         [](const testing::TestParamInfo<FeedCase>& info) { return info.param.name; });

TEST(FrameDecoderTest, OversizedLengthRejectedWithoutBuffering) {
  FrameDecoder decoder(kDefaultMaxFrameBytes);
  decoder.Feed(Varint(uint64_t{1} << 31));  // a 2 GiB claim
  std::string payload;
  EXPECT_EQ(decoder.Next(&payload), FrameDecoder::Result::kError);
  EXPECT_EQ(decoder.error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(decoder.error().message().find("2147483648"), std::string::npos);
  // Input after the error is ignored: nothing accumulates, the caller closes the connection.
  for (int i = 0; i < 64; ++i) decoder.Feed(std::string(4096, 'a'));
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
  EXPECT_EQ(decoder.Next(&payload), FrameDecoder::Result::kError);
}

TEST(FrameDecoderTest, PartialLargeFrameBuffersOnlyWhatArrived) {
  FrameDecoder decoder(kDefaultMaxFrameBytes);
  decoder.Feed(Varint(kDefaultMaxFrameBytes) + "abc");  // claims 4 MiB, sends 3 bytes
  std::string payload;
  EXPECT_EQ(decoder.Next(&payload), FrameDecoder::Result::kNeedMore);
  EXPECT_LT(decoder.buffered_bytes(), 16u);
  EXPECT_EQ(decoder.Finish().code(), StatusCode::kInvalidArgument);
}

TEST(FrameDecoderTest, ManyFramesStraddlingReads) {
  FrameDecoder decoder(1024);
  const std::string frame = Frame(std::string(100, 'q'));
  std::string payload;
  decoder.Feed(frame.substr(0, 10));
  for (int i = 0; i < 1000; ++i) {
    decoder.Feed(frame.substr(10, 40));
    ASSERT_EQ(decoder.Next(&payload), FrameDecoder::Result::kNeedMore);
    decoder.Feed(frame.substr(50) + frame.substr(0, 10));  // the rest plus the start of the next
    ASSERT_EQ(decoder.Next(&payload), FrameDecoder::Result::kFrame);
    ASSERT_EQ(payload, std::string(100, 'q'));
    ASSERT_EQ(decoder.buffered_bytes(), 10u);
  }
}

TEST(FrameTest, EncodeFrameIsVarintLengthPlusSerializedMessage) {
  niels::v1::Request request;
  request.set_request_id(7);
  request.mutable_chat()->set_user_text(std::string(200, 'u'));  // length needs a 2-byte varint
  const std::string body = request.SerializeAsString();
  ASSERT_GT(body.size(), 127u);
  EXPECT_EQ(EncodeFrame(request), Frame(body));
}

TEST(FrameTest, RequestAndResponseRoundTrip) {
  niels::v1::Request request;
  request.set_request_id(0xFFFFFFFFFFull);
  auto* chat = request.mutable_chat();
  chat->set_session_id("0123456789abcdef0123456789abcdef");
  chat->set_user_text("who is niels\xE2\x80\x99 friend?");
  chat->mutable_sampling()->set_temperature(0.0f);
  chat->set_use_kv_cache(false);
  niels::v1::Response token;
  token.set_request_id(5);
  token.mutable_token()->set_id(42);
  token.mutable_token()->set_text(" hi");
  niels::v1::Response error;
  error.set_request_id(6);
  error.mutable_error()->set_code(niels::v1::CANCELLED);

  FrameDecoder decoder;
  decoder.Feed(EncodeFrame(request) + EncodeFrame(token) + EncodeFrame(error));
  std::string payload;
  niels::v1::Request got_request;
  ASSERT_EQ(decoder.Next(&payload), FrameDecoder::Result::kFrame);
  ASSERT_TRUE(ParseFrame(payload, &got_request).ok());
  EXPECT_EQ(got_request.SerializeAsString(), request.SerializeAsString());
  EXPECT_TRUE(got_request.chat().sampling().has_temperature());
  EXPECT_TRUE(got_request.chat().has_use_kv_cache());
  EXPECT_FALSE(got_request.chat().use_kv_cache());
  for (const auto* want : {&token, &error}) {
    niels::v1::Response got;
    ASSERT_EQ(decoder.Next(&payload), FrameDecoder::Result::kFrame);
    ASSERT_TRUE(ParseFrame(payload, &got).ok());
    EXPECT_EQ(got.SerializeAsString(), want->SerializeAsString());
    EXPECT_EQ(got.kind_case(), want->kind_case());
  }
  EXPECT_EQ(decoder.Next(&payload), FrameDecoder::Result::kNeedMore);
  EXPECT_TRUE(decoder.Finish().ok());
}

TEST(FrameTest, ParseFrameRejectsInvalidBytes) {
  const std::vector<std::string> bad = {
      std::string("\xff\xff\xff", 3),           // tag with an unterminated varint
      std::string("\x0a\x05hi", 4),             // field 1 length 5 but only 2 bytes follow
      std::string("\x62\x03\x0a\x10x", 5),      // chat with a nested truncated string
      std::string("\x07", 1),                   // wire type 7 does not exist
  };
  for (const std::string& bytes : bad) {
    niels::v1::Request request;
    Status s = ParseFrame(bytes, &request);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << testing::PrintToString(bytes);
    EXPECT_NE(s.message().find("niels.v1.Request"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace niels::common
