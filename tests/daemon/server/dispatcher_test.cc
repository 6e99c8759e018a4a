// Dispatcher: unknown kinds, Cancel (connection-local), duplicate ids, several requests in flight
// on one connection, and the connection count added to Stats.
#include "daemon/server/dispatcher.h"

#include <map>

#include <gtest/gtest.h>

#include "tests/daemon/server/server_fixture.h"

namespace niels::daemon::server::testing {
namespace {

TEST_F(ServerTest, RequestWithoutKindIsUnimplemented) {
  StartServer();
  RawClient client(socket_path());
  niels::v1::Request empty;
  empty.set_request_id(8);
  ASSERT_TRUE(client.Send(empty));
  std::optional<niels::v1::Response> response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 8u);
  ASSERT_TRUE(response->has_error());
  EXPECT_EQ(response->error().code(), niels::v1::UNIMPLEMENTED);
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(ServerTest, RequestOfANewerProtocolKindIsUnimplemented) {
  StartServer();
  RawClient client(socket_path());
  // request_id = 9 (field 1), then field 99 (a kind this build does not know) as an empty message.
  std::string payload = std::string("\x08\x09", 2) + std::string("\x9a\x06\x00", 3);
  niels::v1::Request check;
  ASSERT_TRUE(check.ParseFromString(payload));  // valid protobuf, unknown field
  std::string frame = std::string(1, static_cast<char>(payload.size())) + payload;
  ASSERT_TRUE(client.WriteBytes(frame));
  std::optional<niels::v1::Response> response = client.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->request_id(), 9u);
  EXPECT_EQ(response->error().code(), niels::v1::UNIMPLEMENTED);
  // The connection keeps working.
  ASSERT_TRUE(client.Send(InfoRequest(10)));
  ASSERT_TRUE(client.Read().has_value());
}

TEST_F(ServerTest, CancelStopsTheStreamAndReportsFound) {
  StartServer();
  engine_.token_gap = std::chrono::milliseconds(1);
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(ChatRequest(50, 1000000, /*stream=*/true)));
  std::optional<niels::v1::Response> event = client.Read();
  ASSERT_TRUE(event.has_value());
  ASSERT_TRUE(event->has_token());
  ASSERT_TRUE(client.Send(CancelRequest(51, 50)));
  std::optional<niels::v1::Response> cancel_response;
  std::optional<niels::v1::Response> chat_final;
  while (!cancel_response || !chat_final) {
    std::optional<niels::v1::Response> response = client.Read();
    ASSERT_TRUE(response.has_value());
    if (response->request_id() == 51) cancel_response = response;
    if (response->request_id() == 50 && !response->has_token()) chat_final = response;
  }
  EXPECT_TRUE(cancel_response->cancel().found());
  ASSERT_TRUE(chat_final->has_error());
  EXPECT_EQ(chat_final->error().code(), niels::v1::CANCELLED);
  Outcome outcome{};
  ASSERT_TRUE(engine_.WaitForOutcome(50, &outcome));
  EXPECT_EQ(outcome, Outcome::kCancelled);
  // The cancelled id is free again; a cancel of a finished or unknown id finds nothing.
  ASSERT_TRUE(client.Send(CancelRequest(52, 50)));
  std::optional<niels::v1::Response> again = client.ReadFinal(52);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(again->cancel().found());
  // Cancel never reaches the engine.
  for (const auto& request : engine_.submitted()) EXPECT_FALSE(request.has_cancel());
}

TEST_F(ServerTest, CancelIsConnectionLocal) {
  StartServer();
  engine_.token_gap = std::chrono::milliseconds(1);
  RawClient owner(socket_path());
  RawClient other(socket_path());
  ASSERT_TRUE(owner.Send(ChatRequest(60, 1000000, /*stream=*/true)));
  ASSERT_TRUE(owner.Read().has_value());
  ASSERT_TRUE(other.Send(CancelRequest(61, 60)));
  std::optional<niels::v1::Response> response = other.ReadFinal(61);
  ASSERT_TRUE(response.has_value());
  EXPECT_FALSE(response->cancel().found());
  ASSERT_TRUE(owner.Send(CancelRequest(62, 60)));
  response = owner.ReadFinal(62);
  ASSERT_TRUE(response.has_value());
  EXPECT_TRUE(response->cancel().found());
}

TEST_F(ServerTest, SeveralRequestsInFlightOnOneConnectionEchoTheirIds) {
  StartServer();
  RawClient client(socket_path());
  const std::map<uint64_t, int> tokens = {{11, 5}, {12, 2}, {13, 7}};
  std::string bytes;
  for (const auto& [id, n] : tokens) bytes += common::EncodeFrame(ChatRequest(id, n, /*stream=*/true));
  ASSERT_TRUE(client.WriteBytes(bytes));
  std::map<uint64_t, int> events;
  std::map<uint64_t, std::string> replies;
  while (replies.size() < tokens.size()) {
    std::optional<niels::v1::Response> response = client.Read();
    ASSERT_TRUE(response.has_value());
    ASSERT_TRUE(tokens.count(response->request_id())) << response->request_id();
    if (response->has_token()) {
      EXPECT_EQ(response->token().index(), events[response->request_id()]++);
    } else {
      replies[response->request_id()] = response->chat().reply();
    }
  }
  for (const auto& [id, n] : tokens) {
    EXPECT_EQ(events[id], n) << id;
    std::string expected;
    for (int i = 0; i < n; ++i) expected += "t" + std::to_string(i);
    EXPECT_EQ(replies[id], expected) << id;
  }
}

TEST_F(ServerTest, DuplicateInFlightIdIsInvalidArgument) {
  StartServer();
  engine_.token_gap = std::chrono::milliseconds(1);
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(ChatRequest(70, 1000000, /*stream=*/true)));
  ASSERT_TRUE(client.Read().has_value());
  ASSERT_TRUE(client.Send(InfoRequest(70)));
  std::optional<niels::v1::Response> response;
  do {
    response = client.Read();
    ASSERT_TRUE(response.has_value());
  } while (response->has_token());
  ASSERT_TRUE(response->has_error());
  EXPECT_EQ(response->error().code(), niels::v1::INVALID_ARGUMENT);
  EXPECT_EQ(engine_.submitted().size(), 1u);
  ASSERT_TRUE(client.Send(CancelRequest(71, 70)));
  ASSERT_TRUE(client.ReadFinal(70).has_value());
  // Once finished, the id can be used again.
  ASSERT_TRUE(client.Send(InfoRequest(70)));
  response = client.ReadFinal(70);
  ASSERT_TRUE(response.has_value());
  EXPECT_TRUE(response->has_info());
}

TEST_F(ServerTest, StatsCountsLiveConnections) {
  StartServer();
  RawClient first(socket_path());
  RawClient second(socket_path());
  RawClient third(socket_path());
  // Make sure all three were accepted (each answered once) before asking.
  for (RawClient* client : {&first, &second, &third}) {
    ASSERT_TRUE(client->Send(InfoRequest(1)));
    ASSERT_TRUE(client->Read().has_value());
  }
  niels::v1::Request stats;
  stats.set_request_id(2);
  stats.mutable_stats();
  ASSERT_TRUE(first.Send(stats));
  std::optional<niels::v1::Response> response = first.Read();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->stats().connections(), 3u);
  EXPECT_EQ(response->stats().sessions(), 7u);  // the engine's part is kept
}

}  // namespace
}  // namespace niels::daemon::server::testing
