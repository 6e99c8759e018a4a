// Cancel and disconnect in the middle of a streamed reply: generation stops, the session is exactly
// as before the turn, and the daemon keeps serving. Peer credentials: another uid is denied.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "common/frame.h"
#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

constexpr int kLongReply = 900;  // far more than can be produced before the cancel arrives

class CancelTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    auto info = client_->Info();
    ASSERT_TRUE(info.ok());
    info_ = *info;
    auto created = client_->CreateSession(std::string("be brief"));
    ASSERT_TRUE(created.ok());
    session_ = created->session_id();
    ASSERT_TRUE(client_->Chat(GreedyChat(session_, "first turn")).ok());
    auto before = client_->GetSession(session_);
    ASSERT_TRUE(before.ok());
    before_ = *before;
  }

  // A streamed chat that cannot end early: eot is banned, so only max_new_tokens stops it.
  niels::v1::ChatRequest EndlessChat() {
    niels::v1::ChatRequest request = GreedyChat(session_, "keep talking", kLongReply);
    request.mutable_sampling()->add_banned_ids(info_.eot_id());
    request.set_stream(true);
    return request;
  }

  void ExpectSessionUnchanged() {
    auto after = client_->GetSession(session_);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->session().length(), before_.session().length());
    EXPECT_EQ(after->session().turns(), before_.session().turns());
    EXPECT_TRUE(std::equal(after->token_ids().begin(), after->token_ids().end(),
                           before_.token_ids().begin(), before_.token_ids().end()));
  }

  uint64_t TokensGenerated() {
    auto stats = client_->Stats();
    EXPECT_TRUE(stats.ok());
    return stats.ok() ? stats->tokens_generated_total() : 0;
  }

  std::unique_ptr<client::DaemonClient> client_;
  niels::v1::InfoResponse info_;
  std::string session_;
  niels::v1::GetSessionResponse before_;
};

TEST_F(CancelTest, CancelMidStreamRestoresTheSession) {
  const uint64_t generated_before = TokensGenerated();
  int events = 0;
  auto reply = client_->Chat(EndlessChat(), [&](const niels::v1::TokenEvent&) {
    if (++events == 3) client_->RequestCancel();
  });
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), common::StatusCode::kCancelled);
  EXPECT_GE(events, 3);
  EXPECT_LT(events, kLongReply);
  ExpectSessionUnchanged();
  EXPECT_LT(TokensGenerated() - generated_before, static_cast<uint64_t>(kLongReply));
  // Still serving, and the session takes a normal turn.
  auto next = client_->Chat(GreedyChat(session_, "are you there"));
  EXPECT_TRUE(next.ok()) << next.status().ToString();
}

// Cancel with keep_output (DaemonClient::RequestStop) over the socket: the call returns its reply
// with STOPPED, the session keeps the turn, and the next turn follows it.
TEST_F(CancelTest, StopMidStreamKeepsTheReply) {
  int events = 0;
  auto reply = client_->Chat(EndlessChat(), [&](const niels::v1::TokenEvent&) {
    if (++events == 3) client_->RequestStop();
  });
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->stop_reason(), niels::v1::STOPPED);
  EXPECT_GE(reply->reply_ids_size(), 3);
  EXPECT_LT(reply->reply_ids_size(), kLongReply);
  EXPECT_EQ(reply->reply_ids_size(), events);
  auto after = client_->GetSession(session_);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->session().turns(), before_.session().turns() + 1);
  EXPECT_GT(after->session().length(), before_.session().length() + reply->reply_ids_size());
  auto next = client_->Chat(GreedyChat(session_, "are you there"));
  EXPECT_TRUE(next.ok()) << next.status().ToString();
}

TEST_F(CancelTest, DisconnectMidStreamStopsGeneration) {
  const uint64_t generated_before = TokensGenerated();
  {
    // A raw connection that sends the request, reads one token event and hangs up.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path().c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    niels::v1::Request request;
    request.set_request_id(1);
    *request.mutable_chat() = EndlessChat();
    std::string frame = common::EncodeFrame(request);
    ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
    common::FrameDecoder decoder;
    std::string payload;
    char buffer[4096];
    while (decoder.Next(&payload) != common::FrameDecoder::Result::kFrame) {
      ssize_t n = ::read(fd, buffer, sizeof(buffer));
      ASSERT_GT(n, 0);
      decoder.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    }
    niels::v1::Response first;
    ASSERT_TRUE(first.ParseFromString(payload));
    EXPECT_TRUE(first.has_token());
    ::close(fd);
  }
  // The engine runs jobs in order, so this answer comes after the abandoned turn has ended.
  ExpectSessionUnchanged();
  EXPECT_LT(TokensGenerated() - generated_before, static_cast<uint64_t>(kLongReply));
  EXPECT_TRUE(client_->Chat(GreedyChat(session_, "still there?")).ok());
}

TEST_F(CancelTest, AnotherUidIsDeniedAndSeesNoSessions) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to switch to uid 65533";
  ASSERT_EQ(::chmod(socket_path().c_str(), 0666), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 0 all as expected, 10+ which check failed.
    if (::setgid(65533) != 0 || ::setuid(65533) != 0) ::_exit(10);
    auto connected = client::DaemonClient::Connect(socket_path().string());
    if (!connected.ok()) ::_exit(11);
    auto& other = **connected;
    if (other.GetSession(session_).status().code() != common::StatusCode::kPermissionDenied) ::_exit(12);
    if (other.Chat(GreedyChat(session_, "let me in")).status().code() !=
        common::StatusCode::kPermissionDenied) {
      ::_exit(13);
    }
    if (other.DeleteSession(session_).status().code() != common::StatusCode::kPermissionDenied) ::_exit(14);
    auto listed = other.ListSessions();
    if (!listed.ok() || listed->sessions_size() != 0) ::_exit(15);
    // Its own session works and is listed.
    auto own = other.CreateSession(std::nullopt);
    if (!own.ok()) ::_exit(16);
    listed = other.ListSessions();
    if (!listed.ok() || listed->sessions_size() != 1) ::_exit(17);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the exit code map in the child";
  ExpectSessionUnchanged();
  auto listed = client_->ListSessions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sessions_size(), 1);  // root's own only (the child's is not listed here)
}

}  // namespace
}  // namespace niels::integration
