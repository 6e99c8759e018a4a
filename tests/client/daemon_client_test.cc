#include "client/daemon_client.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/client/fake_daemon.h"

namespace niels::client {
namespace {

using common::StatusCode;
using testing_support::FakeDaemon;
using testing_support::FakeReply;
using testing_support::Send;
using testing_support::SendRaw;

std::unique_ptr<DaemonClient> MustConnect(const FakeDaemon& fake) {
  auto client = DaemonClient::Connect(fake.path());
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}

v1::Response TokenResponse(uint64_t id, int index, const std::string& text) {
  v1::Response r = FakeDaemon::Reply(id);
  r.mutable_token()->set_id(100 + index);
  r.mutable_token()->set_index(index);
  r.mutable_token()->set_text(text);
  return r;
}

v1::Response ErrorResponse(uint64_t id, v1::ErrorCode code, const std::string& message) {
  v1::Response r = FakeDaemon::Reply(id);
  r.mutable_error()->set_code(code);
  r.mutable_error()->set_message(message);
  return r;
}

TEST(DaemonClientTest, ConnectFailureIsUnavailableNamingPath) {
  const std::string path = "/tmp/niels-client-test-does-not-exist/nielsd.sock";
  auto client = DaemonClient::Connect(path);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(client.status().message(),
            "cannot reach nielsd at " + path + " (No such file or directory)");
}

// Every typed call sends its oneof kind with ids 1, 2, 3, ... and returns the matching result.
TEST(DaemonClientTest, EveryCallSendsItsKindAndReturnsItsResult) {
  FakeDaemon fake([](const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    switch (q.kind_case()) {
      case v1::Request::kInfo: r.mutable_info()->set_model_name("tiny"); break;
      case v1::Request::kCreateSession:
        r.mutable_create_session()->set_session_id(q.create_session().has_system_prompt() ? "with" : "none");
        break;
      case v1::Request::kChat: r.mutable_chat()->set_reply("re:" + q.chat().user_text()); break;
      case v1::Request::kGenerate: r.mutable_generate()->add_new_ids(q.generate().input_ids_size()); break;
      case v1::Request::kTokenize: r.mutable_tokenize()->add_ids(q.tokenize().text().size()); break;
      case v1::Request::kDetokenize: r.mutable_detokenize()->set_text(std::to_string(q.detokenize().ids(1))); break;
      case v1::Request::kGetSession: r.mutable_get_session()->mutable_session()->set_session_id(q.get_session().session_id()); break;
      case v1::Request::kListSessions: r.mutable_list_sessions()->add_sessions(); break;
      case v1::Request::kForkSession: r.mutable_fork_session()->set_session_id(q.fork_session().session_id() + "-fork"); break;
      case v1::Request::kResetSession: r.mutable_reset_session()->set_length(3); break;
      case v1::Request::kDeleteSession: r.mutable_delete_session(); break;
      case v1::Request::kCancel: r.mutable_cancel()->set_found(q.cancel().target_request_id() == 77); break;
      case v1::Request::kStats: r.mutable_stats()->set_sessions(5); break;
      default: break;
    }
    return Send({r});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);

  EXPECT_EQ(client->Info()->model_name(), "tiny");
  EXPECT_EQ(client->CreateSession(std::string("sys"))->session_id(), "with");
  EXPECT_EQ(client->CreateSession(std::nullopt)->session_id(), "none");
  v1::ChatRequest chat;
  chat.set_user_text("hi");
  EXPECT_EQ(client->Chat(chat)->reply(), "re:hi");
  v1::GenerateRequest gen;
  gen.add_input_ids(1);
  gen.add_input_ids(2);
  EXPECT_EQ(client->Generate(gen)->new_ids(0), 2);
  EXPECT_EQ(client->Tokenize("abcd")->ids(0), 4);
  EXPECT_EQ(client->Detokenize({7, 8})->text(), "8");
  EXPECT_EQ(client->GetSession("s1")->session().session_id(), "s1");
  EXPECT_EQ(client->ListSessions()->sessions_size(), 1);
  EXPECT_EQ(client->ForkSession("s1")->session_id(), "s1-fork");
  EXPECT_EQ(client->ResetSession("s1")->length(), 3);
  EXPECT_TRUE(client->DeleteSession("s1").ok());
  EXPECT_TRUE(client->Cancel(77)->found());
  EXPECT_EQ(client->Stats()->sessions(), 5u);
  EXPECT_EQ(client->last_request_id(), 14u);

  const std::vector<v1::Request::KindCase> kinds = {
      v1::Request::kInfo, v1::Request::kCreateSession, v1::Request::kCreateSession,
      v1::Request::kChat, v1::Request::kGenerate, v1::Request::kTokenize,
      v1::Request::kDetokenize, v1::Request::kGetSession, v1::Request::kListSessions,
      v1::Request::kForkSession, v1::Request::kResetSession, v1::Request::kDeleteSession,
      v1::Request::kCancel, v1::Request::kStats};
  const auto requests = fake.requests();
  ASSERT_EQ(requests.size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(requests[i].kind_case(), kinds[i]) << i;
    EXPECT_EQ(requests[i].request_id(), i + 1);
  }
  EXPECT_EQ(requests[1].create_session().system_prompt(), "sys");
  EXPECT_FALSE(requests[2].create_session().has_system_prompt());
}

TEST(DaemonClientTest, WireErrorsBecomeStatusWithSameCodeAndMessage) {
  const std::vector<std::pair<v1::ErrorCode, StatusCode>> table = {
      {v1::INVALID_ARGUMENT, StatusCode::kInvalidArgument},
      {v1::NOT_FOUND, StatusCode::kNotFound},
      {v1::PERMISSION_DENIED, StatusCode::kPermissionDenied},
      {v1::RESOURCE_EXHAUSTED, StatusCode::kResourceExhausted},
      {v1::CANCELLED, StatusCode::kCancelled},
      {v1::UNAVAILABLE, StatusCode::kUnavailable},
      {v1::UNIMPLEMENTED, StatusCode::kUnimplemented},
      {v1::INTERNAL, StatusCode::kInternal},
  };
  size_t next = 0;
  FakeDaemon fake([&](const v1::Request& q) {
    const auto code = table[next].first;
    ++next;
    return Send({ErrorResponse(q.request_id(), code, "detail " + std::to_string(next))});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  for (size_t i = 0; i < table.size(); ++i) {
    auto got = client->GetSession("nope");
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), table[i].second);
    EXPECT_EQ(got.status().message(), "detail " + std::to_string(i + 1));
  }
}

TEST(DaemonClientTest, StreamEventsArriveInOrderBeforeFinal) {
  FakeDaemon fake([](const v1::Request& q) {
    v1::Response final_response = FakeDaemon::Reply(q.request_id());
    final_response.mutable_chat()->set_reply("abc");
    // A stray response for an id nobody asked about is ignored.
    v1::Response stray = FakeDaemon::Reply(999);
    stray.mutable_stats();
    return Send({TokenResponse(q.request_id(), 0, "a"), stray, TokenResponse(q.request_id(), 1, "b"),
                      TokenResponse(q.request_id(), 2, "c"), final_response});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  v1::ChatRequest chat;
  chat.set_stream(true);
  std::string streamed;
  std::vector<int> indices;
  auto reply = client->Chat(chat, [&](const v1::TokenEvent& e) {
    streamed += e.text();
    indices.push_back(e.index());
  });
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(streamed, "abc");
  EXPECT_EQ(reply->reply(), "abc");
  EXPECT_EQ(indices, (std::vector<int>{0, 1, 2}));
}

// The fake sends two tokens; the callback asks to cancel; the client sends Cancel for the chat's
// id on the same connection and returns the daemon's CANCELLED final response.
TEST(DaemonClientTest, CancelDuringStreamSendsCancelForTarget) {
  FakeDaemon fake([](const v1::Request& q) {
    if (q.has_chat()) return Send({TokenResponse(q.request_id(), 0, "x"), TokenResponse(q.request_id(), 1, "y")});
    if (q.has_cancel()) {
      v1::Response ack = FakeDaemon::Reply(q.request_id());
      ack.mutable_cancel()->set_found(true);
      return Send({ack, ErrorResponse(q.cancel().target_request_id(), v1::CANCELLED, "cancelled")});
    }
    v1::Response info = FakeDaemon::Reply(q.request_id());
    info.mutable_info()->set_model_name("after");
    return Send({info});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  v1::ChatRequest chat;
  chat.set_stream(true);
  int tokens = 0;
  auto reply = client->Chat(chat, [&](const v1::TokenEvent&) {
    if (++tokens == 1) client->RequestCancel();
  });
  EXPECT_EQ(reply.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(tokens, 2);
  // The connection stays usable.
  EXPECT_EQ(client->Info()->model_name(), "after");
  const auto requests = fake.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].request_id(), 1u);
  EXPECT_TRUE(requests[1].has_cancel());
  EXPECT_EQ(requests[1].request_id(), 2u);
  EXPECT_EQ(requests[1].cancel().target_request_id(), 1u);
  EXPECT_EQ(requests[2].request_id(), 3u);
}

// A cancel that loses the race: the turn completes, the Cancel reply (found=false) arrives
// afterwards and is consumed so the next call reads its own response.
TEST(DaemonClientTest, CancelAfterCompletionKeepsConnectionInStep) {
  FakeDaemon fake([](const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    if (q.has_chat()) r.mutable_chat()->set_reply("done");
    if (q.has_cancel()) r.mutable_cancel()->set_found(false);
    if (q.has_stats()) r.mutable_stats()->set_sessions(1);
    return Send({r});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  client->RequestCancel();  // pending before the call: acted on as soon as the call starts
  auto reply = client->Chat(v1::ChatRequest());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->reply(), "done");
  EXPECT_EQ(client->Stats()->sessions(), 1u);
  ASSERT_EQ(fake.requests().size(), 3u);
  EXPECT_TRUE(fake.requests()[1].has_cancel());
}

TEST(DaemonClientTest, ClearedCancelRequestIsNotSent) {
  FakeDaemon fake([](const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    r.mutable_stats();
    return Send({r});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  client->RequestCancel();
  client->ClearCancelRequest();
  EXPECT_TRUE(client->Stats().ok());
  EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(DaemonClientTest, DaemonClosingMidCallIsUnavailableAndStaysSo) {
  FakeDaemon fake([](const v1::Request& q) {
    return Send({TokenResponse(q.request_id(), 0, "a")}, /*close=*/true);
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  v1::ChatRequest chat;
  chat.set_stream(true);
  auto reply = client->Chat(chat);
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find(fake.path()), std::string::npos) << reply.status().message();
  auto again = client->Info();
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(fake.requests().size(), 1u);
}

TEST(DaemonClientTest, CorruptFrameIsInternal) {
  FakeDaemon fake([](const v1::Request&) {
    return SendRaw(std::string("\x03\xff\xff\xff", 4));  // a 3-byte frame that is no message
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  auto info = client->Info();
  EXPECT_EQ(info.status().code(), StatusCode::kInternal);
  EXPECT_NE(info.status().message().find("niels.v1.Response"), std::string::npos) << info.status().message();
}

TEST(DaemonClientTest, WrongResponseKindIsInternal) {
  FakeDaemon fake([](const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    r.mutable_stats();
    return Send({r});
  });
  auto client = MustConnect(fake);
  ASSERT_TRUE(client);
  EXPECT_EQ(client->Info().status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace niels::client
