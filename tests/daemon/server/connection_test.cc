// Connection: framing over a real socket (split and combined frames, corrupt framing closes only
// that connection, a bad message is answered and the connection kept), cancel on disconnect, and
// the bounded output queue.
#include "daemon/server/connection.h"

#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

#include "tests/daemon/server/server_fixture.h"

namespace niels::daemon::server::testing {
namespace {

TEST_F(ServerTest, FrameSplitAcrossManyWritesIsDecoded) {
  StartServer();
  RawClient client(socket_path());
  ASSERT_TRUE(client.connected());
  std::string frame = common::EncodeFrame(InfoRequest(41));
  for (char byte : frame) {
    ASSERT_TRUE(client.WriteBytes(std::string_view(&byte, 1)));
    std::this_thread::yield();
  }
  std::optional<niels::v1::Response> response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 41u);
  EXPECT_EQ(response->info().model_name(), "fake");
}

TEST_F(ServerTest, SeveralFramesInOneWriteAreAllAnswered) {
  StartServer();
  RawClient client(socket_path());
  std::string bytes;
  for (uint64_t id : {1, 2, 3}) bytes += common::EncodeFrame(InfoRequest(id));
  ASSERT_TRUE(client.WriteBytes(bytes));
  std::set<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    std::optional<niels::v1::Response> response = client.Read();
    ASSERT_TRUE(response.has_value());
    EXPECT_TRUE(response->has_info());
    ids.insert(response->request_id());
  }
  EXPECT_EQ(ids, (std::set<uint64_t>{1, 2, 3}));
}

TEST_F(ServerTest, MalformedVarintClosesOnlyThatConnection) {
  StartServer();
  RawClient bad(socket_path());
  RawClient good(socket_path());
  ASSERT_TRUE(good.Send(InfoRequest(5)));
  ASSERT_TRUE(good.Read().has_value());
  ASSERT_TRUE(bad.WriteBytes(std::string(11, '\xff')));  // a varint longer than 10 bytes
  EXPECT_TRUE(bad.WaitForClose());
  ASSERT_TRUE(good.Send(InfoRequest(6)));
  std::optional<niels::v1::Response> response = good.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 6u);
  EXPECT_TRUE(response->has_info());
}

TEST_F(ServerTest, OversizedFrameClosesOnlyThatConnection) {
  DaemonOptions options;
  options.connection.max_frame_bytes = 1024;
  StartServer(options);
  RawClient bad(socket_path());
  RawClient good(socket_path());
  niels::v1::Request big = ChatRequest(9, 1, false, std::string(4096, 'x'));
  ASSERT_TRUE(bad.Send(big));
  EXPECT_TRUE(bad.WaitForClose());
  ASSERT_TRUE(good.Send(InfoRequest(10)));
  std::optional<niels::v1::Response> response = good.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 10u);
  // The oversized request never reached the engine.
  for (const auto& request : engine_.submitted()) EXPECT_NE(request.request_id(), 9u);
}

TEST_F(ServerTest, BadMessageInGoodFrameIsAnsweredAndConnectionKept) {
  StartServer();
  RawClient client(socket_path());
  // A well-framed payload that is not a Request: field 1 with wire type 7 (invalid).
  std::string payload = "\x0f\x01\x02";
  std::string frame = std::string(1, static_cast<char>(payload.size())) + payload;
  ASSERT_TRUE(client.WriteBytes(frame));
  std::optional<niels::v1::Response> response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 0u);
  ASSERT_TRUE(response->has_error());
  EXPECT_EQ(response->error().code(), niels::v1::INVALID_ARGUMENT);
  ASSERT_TRUE(client.Send(InfoRequest(12)));
  response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 12u);
}

TEST_F(ServerTest, TruncatedFrameAtEofDoesNotDisturbOthers) {
  StartServer();
  RawClient good(socket_path());
  {
    RawClient bad(socket_path());
    std::string frame = common::EncodeFrame(InfoRequest(77));
    ASSERT_TRUE(bad.WriteBytes(frame.substr(0, frame.size() - 1)));
  }
  ASSERT_TRUE(good.Send(InfoRequest(78)));
  std::optional<niels::v1::Response> response = good.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 78u);
}

TEST_F(ServerTest, DisconnectSetsTheCancelFlagOfInFlightRequests) {
  StartServer();
  auto client = std::make_unique<RawClient>(socket_path());
  ASSERT_TRUE(client->Send(ChatRequest(21, 1000000, /*stream=*/true)));
  std::optional<niels::v1::Response> event = client->Read();
  ASSERT_TRUE(event.has_value());
  EXPECT_TRUE(event->has_token());
  client.reset();  // disconnect mid-stream
  Outcome outcome{};
  ASSERT_TRUE(engine_.WaitForOutcome(21, &outcome));
  EXPECT_NE(outcome, Outcome::kCompleted);
}

TEST_F(ServerTest, ClientThatStopsReadingDoesNotStallOthers) {
  DaemonOptions options;
  options.connection.max_queued_bytes = 64 * 1024;
  StartServer(options);
  engine_.token_gap = std::chrono::microseconds(0);
  RawClient stalled(socket_path());
  RawClient other(socket_path());
  // 16 KiB per token, effectively endless: far more than socket buffers plus the queue bound.
  ASSERT_TRUE(stalled.Send(ChatRequest(31, 1000000, /*stream=*/true, std::string(16 * 1024, 'x'))));
  // The other connection is served meanwhile, streams included.
  for (uint64_t id = 100; id < 105; ++id) {
    ASSERT_TRUE(other.Send(ChatRequest(id, 4, /*stream=*/true)));
    int events = 0;
    std::optional<niels::v1::Response> final_response = other.ReadFinal(id, &events);
    ASSERT_TRUE(final_response.has_value());
    EXPECT_EQ(events, 4);
    EXPECT_EQ(final_response->chat().reply(), "t0t1t2t3");
  }
  // The stalled stream was refused by its bounded queue, so the engine cancelled it.
  Outcome outcome{};
  ASSERT_TRUE(engine_.WaitForOutcome(31, &outcome));
  EXPECT_EQ(outcome, Outcome::kRefused);
}

TEST_F(ServerTest, PeerUidReachesTheEngine) {
  StartServer();
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(InfoRequest(3)));
  std::optional<niels::v1::Response> response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->info().daemon_version(), "uid=" + std::to_string(::getuid()));
}

}  // namespace
}  // namespace niels::daemon::server::testing
