// A real nielsd under hostile and careless clients: a client that floods frames and never reads, a
// user who floods connections, sessions and requests while another user chats, requests pipelined
// behind a chat on the same session, nielsd out of file descriptors, and nielsd in a user namespace
// where other users' uids collapse to the overflow uid.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/frame.h"
#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

using Clock = std::chrono::steady_clock;

// A plain socket that writes frames and reads responses (pipelining several requests in one write).
class RawConnection {
 public:
  explicit RawConnection(const std::filesystem::path& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool Write(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // The next response; nullopt on EOF or after `timeout`.
  std::optional<v1::Response> Read(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::string payload;
    const Clock::time_point end = Clock::now() + timeout;
    while (decoder_.Next(&payload) != common::FrameDecoder::Result::kFrame) {
      timeval tv{};
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(end - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      tv.tv_sec = left / 1000000;
      tv.tv_usec = left % 1000000;
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char buffer[65536];
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return std::nullopt;
      decoder_.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    }
    v1::Response response;
    if (!response.ParseFromString(payload)) return std::nullopt;
    return response;
  }
  // Responses until the final one of `request_id` (events and other ids skipped).
  std::optional<v1::Response> ReadFinal(uint64_t request_id) {
    for (;;) {
      auto response = Read();
      if (!response) return std::nullopt;
      if (response->request_id() == request_id && !response->has_token()) return response;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  common::FrameDecoder decoder_{64u << 20};
};

// Sends Info (request id 1) on a new connection and returns the first response: the InfoResponse,
// or the refusal a connection over a limit gets.
std::optional<v1::Response> AskInfo(RawConnection& connection, std::chrono::milliseconds timeout) {
  v1::Request info;
  info.set_request_id(1);
  info.mutable_info();
  connection.Write(common::EncodeFrame(info));
  return connection.Read(timeout);
}

// Runs `body` in a child process as `uid` and returns its exit code (body's return value).
int RunAs(uint32_t uid, const std::function<int()>& body) {
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(100);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A line of /proc/PID/status in KiB ("VmRSS:", "RssAnon:"), or -1.
long StatusKiB(pid_t pid, const std::string& key) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  }
  return -1;
}

long RssKiB(pid_t pid) { return StatusKiB(pid, "VmRSS:"); }

class LimitsTest : public IntegrationTest {};

// The measurement: 4 s of zero-length frames from a client that never reads grew nielsd's
// RSS by 763 MB. Now the reader pauses once the replies back up.
TEST_F(LimitsTest, NeverReadingFloodDoesNotGrowTheDaemon) {
  StartDaemon();
  auto client = Connect();
  ASSERT_TRUE(client && client->Info().ok());
  const long rss_before = RssKiB(daemon_->pid());
  RawConnection flooder(socket_path());
  ASSERT_TRUE(flooder.connected());
  ::fcntl(flooder.fd(), F_SETFL, ::fcntl(flooder.fd(), F_GETFL) | O_NONBLOCK);
  const std::string zeros(65536, '\0');
  size_t written = 0;
  for (const Clock::time_point end = Clock::now() + std::chrono::seconds(4); Clock::now() < end;) {
    ssize_t n = ::send(flooder.fd(), zeros.data(), zeros.size(), MSG_NOSIGNAL);
    if (n > 0) {
      written += static_cast<size_t>(n);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  const long rss_after = RssKiB(daemon_->pid());
  std::cout << "never-reading flood: " << written << " bytes written in 4 s; nielsd RSS " << rss_before
            << " KiB -> " << rss_after << " KiB\n";
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << "RSS grew by more than 64 MiB";
  EXPECT_LT(written, 16u << 20) << "nielsd kept reading from a client that reads nothing";
  // Others are served meanwhile.
  auto session = client->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(client->Chat(GreedyChat(session->session_id(), "still there?")).ok());
}

// The activation buffers a prefill leaves in the heap (kept for reuse while the engine works) go
// back to the kernel once the engine has been idle for a second; the session's KV blocks stay.
TEST_F(LimitsTest, IdleDaemonHandsActivationMemoryBack) {
  daemon::model::ModelConfig config = IntegrationConfig();
  config.width = 256;
  config.heads = 4;
  config.d_ff = 2048;
  const std::filesystem::path wide = model_dir().parent_path() / "wide-model";
  testing::WriteModelDir(wide, config, kModelSeed);
  testing::DaemonProcessOptions options = DaemonOptions();
  options.model_dir = wide;
  daemon_ = testing::DaemonProcess::Start(options);
  auto client = Connect();
  ASSERT_TRUE(client && client->Info().ok());
  auto session = client->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok());
  v1::GenerateRequest prefill;
  prefill.set_session_id(session->session_id());
  for (int i = 0; i < 1000; ++i) prefill.add_input_ids(5 + i % 200);
  prefill.set_max_new_tokens(0);
  const long before = StatusKiB(daemon_->pid(), "RssAnon:");
  ASSERT_TRUE(client->Generate(prefill).ok());
  const long busy = StatusKiB(daemon_->pid(), "RssAnon:");
  long idle = busy;
  for (const Clock::time_point end = Clock::now() + std::chrono::seconds(5); Clock::now() < end && idle > busy - 4096;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    idle = StatusKiB(daemon_->pid(), "RssAnon:");
  }
  std::cout << "nielsd anonymous RSS: " << before << " KiB before a 1000-token prefill, " << busy
            << " KiB after it, " << idle << " KiB idle\n";
  EXPECT_LT(idle, busy - 4096) << "an idle nielsd kept its activation buffers";
  auto still = client->GetSession(session->session_id());  // the KV stays: the session is intact
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->session().cached_tokens(), 1000);
}

// GetSession/ForkSession/ResetSession/DeleteSession written in the same write right behind a Chat on
// the same session, while another session generates: each sees the session after the chat.
TEST_F(LimitsTest, RequestsPipelinedBehindAChatOnTheSameSessionKeepTheirOrder) {
  StartDaemon();
  auto client = Connect();
  ASSERT_TRUE(client);
  auto busy = client->CreateSession(std::nullopt);
  ASSERT_TRUE(busy.ok());
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    auto target = client->CreateSession(std::nullopt);
    ASSERT_TRUE(target.ok());
    // A long streamed generation on `busy` keeps the engine decoding.
    RawConnection generating(socket_path());
    v1::Request long_chat;
    long_chat.set_request_id(1);
    *long_chat.mutable_chat() = GreedyChat(busy->session_id(), "tell me everything", 200);
    long_chat.mutable_chat()->set_stream(true);
    ASSERT_TRUE(generating.Write(common::EncodeFrame(long_chat)));
    ASSERT_TRUE(generating.Read().has_value());  // first token: it is running
    RawConnection pipelined(socket_path());
    v1::Request chat;
    chat.set_request_id(1);
    *chat.mutable_chat() = GreedyChat(target->session_id(), "hello there", 8);
    v1::Request quick;
    quick.set_request_id(2);
    switch (which) {
      case 0: quick.mutable_get_session()->set_session_id(target->session_id()); break;
      case 1: quick.mutable_fork_session()->set_session_id(target->session_id()); break;
      case 2: quick.mutable_reset_session()->set_session_id(target->session_id()); break;
      default: quick.mutable_delete_session()->set_session_id(target->session_id()); break;
    }
    ASSERT_TRUE(pipelined.Write(common::EncodeFrame(chat) + common::EncodeFrame(quick)));
    auto first = pipelined.Read();
    auto second = pipelined.Read();
    ASSERT_TRUE(first && second);
    EXPECT_EQ(first->request_id(), 1u) << "the quick request overtook the chat";
    const v1::Response& chat_done = first->request_id() == 1 ? *first : *second;
    const v1::Response& quick_done = first->request_id() == 2 ? *first : *second;
    ASSERT_TRUE(chat_done.has_chat()) << chat_done.DebugString();
    switch (which) {
      case 0:
        EXPECT_EQ(quick_done.get_session().session().length(), chat_done.chat().session_length());
        break;
      case 1: {
        auto fork = client->GetSession(quick_done.fork_session().session_id());
        ASSERT_TRUE(fork.ok());
        EXPECT_EQ(fork->session().length(), chat_done.chat().session_length());
        break;
      }
      case 2:
        EXPECT_EQ(client->GetSession(target->session_id())->session().length(), 0);
        break;
      default:
        EXPECT_TRUE(quick_done.has_delete_session());
        EXPECT_EQ(client->GetSession(target->session_id()).status().code(), common::StatusCode::kNotFound);
        break;
    }
    v1::Request cancel;
    cancel.set_request_id(2);
    cancel.mutable_cancel()->set_target_request_id(1);
    ASSERT_TRUE(generating.Write(common::EncodeFrame(cancel)));
    ASSERT_TRUE(generating.ReadFinal(1).has_value());
  }
}

// One user (uid 65533) takes every connection, session and queue slot it may; root is still served,
// and its chat runs before the flooder's queued chats.
TEST_F(LimitsTest, OneUserFloodingDoesNotLockOutAnother) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to switch uids";
  auto options = DaemonOptions();
  // --ephemeral: a durable daemon unloads idle sessions instead of refusing at --max-sessions-per-uid
  // (its stored sessions are bounded per user by eviction, durable_sessions_test.cc).
  options.extra_args.insert(options.extra_args.end(),
                            {"--max-connections-per-uid", "8", "--max-sessions-per-uid", "4",
                             "--max-queued-per-uid", "6", "--max-sessions", "64", "--ephemeral"});
  daemon_ = testing::DaemonProcess::Start(options);
  ASSERT_EQ(::chmod(socket_path().c_str(), 0666), 0);
  // The flooder keeps its connections open until told to exit (a pipe closed by the parent).
  int release[2];
  int ready[2];
  ASSERT_EQ(::pipe(release), 0);
  ASSERT_EQ(::pipe(ready), 0);
  pid_t flooder = ::fork();
  ASSERT_GE(flooder, 0);
  if (flooder == 0) {
    ::close(release[1]);
    ::close(ready[0]);
    if (::setgid(65533) != 0 || ::setuid(65533) != 0) ::_exit(100);
    std::vector<std::unique_ptr<RawConnection>> connections;
    int refused_connections = 0;
    for (int i = 0; i < 12; ++i) {
      auto connection = std::make_unique<RawConnection>(socket_path());
      auto reply = AskInfo(*connection, std::chrono::seconds(30));
      if (reply && reply->has_info()) {
        connections.push_back(std::move(connection));
      } else if (reply && reply->has_error() && reply->error().code() == v1::RESOURCE_EXHAUSTED) {
        ++refused_connections;
      }
    }
    if (connections.size() != 8 || refused_connections != 4) ::_exit(10);
    std::vector<std::string> sessions;
    int refused_sessions = 0;
    for (int i = 0; i < 6; ++i) {
      v1::Request create;
      create.set_request_id(2 + i);
      create.mutable_create_session();
      connections[0]->Write(common::EncodeFrame(create));
      auto reply = connections[0]->ReadFinal(2 + i);
      if (reply && reply->has_create_session()) sessions.push_back(reply->create_session().session_id());
      if (reply && reply->has_error() && reply->error().code() == v1::RESOURCE_EXHAUSTED) ++refused_sessions;
    }
    if (sessions.size() != 4 || refused_sessions != 2) ::_exit(11);
    // Long uncached chats (eot banned, so none ends early) on every session, more than the queue
    // share allows.
    v1::Request info;
    info.set_request_id(99);
    info.mutable_info();
    connections[1]->Write(common::EncodeFrame(info));
    auto described = connections[1]->ReadFinal(99);
    if (!described || !described->has_info()) ::_exit(13);
    std::string burst;
    for (int i = 0; i < 10; ++i) {
      v1::Request chat;
      chat.set_request_id(100 + i);
      *chat.mutable_chat() = GreedyChat(sessions[i % sessions.size()], "tell me a long story", 600);
      chat.mutable_chat()->set_use_kv_cache(false);
      chat.mutable_chat()->mutable_sampling()->add_banned_ids(described->info().eot_id());
      burst += common::EncodeFrame(chat);
    }
    connections[1]->Write(burst);
    char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(12);
    ::read(release[0], &byte, 1);  // EOF when the parent is done
    ::_exit(0);
  }
  ::close(release[0]);
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the flooder failed early";
  // Root: a new connection, a session and a chat, all while the flooder's chats are queued.
  auto client = Connect();
  ASSERT_TRUE(client);
  auto session = client->CreateSession(std::nullopt);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto chat = client->Chat(GreedyChat(session->session_id(), "hello there", 8));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  // The flooder's 6 accepted chats (4 more were refused) are not all done when root's is: had
  // root's chat waited behind the flood, none would be left. (How many are left depends on the
  // machine's speed: uncached steps of the tiny demo model take about a millisecond.)
  EXPECT_GE(stats->queued_requests() + stats->running_sequences(), 1u) << "root's chat waited behind the flood";
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(flooder, &status, 0), flooder);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the exit codes in the flooder";
}

// Out of file descriptors: connections past the limit get a clear refusal at once (instead of
// hanging in the listen backlog), and nielsd accepts again when descriptors are free.
TEST_F(LimitsTest, OutOfFileDescriptorsRefusesCleanlyAndRecovers) {
  auto options = DaemonOptions();
  options.prefix = {"prlimit", "--nofile=40:40", "--"};
  // The state database's descriptors (about 6) do not fit a 40-descriptor limit beside 20
  // connections; the fit rule itself is what this test is about.
  options.extra_args.push_back("--ephemeral");
  options.extra_args.insert(options.extra_args.end(), {"--max-connections", "1000",
                                                       "--max-connections-per-uid", "1000"});
  daemon_ = testing::DaemonProcess::Start(options);
  std::vector<std::unique_ptr<RawConnection>> open;
  int answered = 0;
  int refused = 0;
  for (int i = 0; i < 60; ++i) {
    auto connection = std::make_unique<RawConnection>(socket_path());
    auto reply = AskInfo(*connection, std::chrono::seconds(5));
    ASSERT_TRUE(reply.has_value()) << "connection " << i << " got no answer within 5 s";
    if (reply->has_info()) {
      ++answered;
      open.push_back(std::move(connection));
    } else {
      EXPECT_EQ(reply->error().code(), v1::RESOURCE_EXHAUSTED);
      EXPECT_NE(reply->error().message().find("file descriptors"), std::string::npos) << reply->error().message();
      ++refused;
    }
  }
  EXPECT_GT(answered, 5);
  EXPECT_GT(refused, 0);
  open.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto client = Connect();
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->Info().ok());
  EXPECT_EQ(daemon_->Stop(), 0);
}

// Default --max-connections fits the open-files limit: peers past it are refused by the limit, not
// by running out of descriptors.
TEST_F(LimitsTest, DefaultConnectionLimitFitsTheOpenFilesLimit) {
  auto options = DaemonOptions();
  options.prefix = {"prlimit", "--nofile=40:40", "--"};
  // The state database's descriptors (about 6) do not fit a 40-descriptor limit beside 20
  // connections; the fit rule itself is what this test is about.
  options.extra_args.push_back("--ephemeral");
  daemon_ = testing::DaemonProcess::Start(options);
  std::vector<std::unique_ptr<RawConnection>> open;
  int refused_by_limit = 0;
  for (int i = 0; i < 40; ++i) {
    auto connection = std::make_unique<RawConnection>(socket_path());
    auto reply = AskInfo(*connection, std::chrono::seconds(5));
    ASSERT_TRUE(reply.has_value());
    if (reply->has_error()) {
      EXPECT_NE(reply->error().message().find("--max-connections"), std::string::npos) << reply->error().message();
      ++refused_by_limit;
    } else {
      open.push_back(std::move(connection));
    }
  }
  EXPECT_GT(refused_by_limit, 0);
  EXPECT_NE(daemon_->log().find("max connections 20"), std::string::npos) << daemon_->log();
}

// nielsd in a private user namespace (as PrivateUsers= would run it): a peer whose uid is not mapped
// is reported as the overflow uid and gets no session, so two such users cannot share sessions.
TEST_F(LimitsTest, UnmappedPeersInAUserNamespaceGetNoSessions) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to switch uids";
  if (testing::RunProcess({"unshare", "--user", "--map-root-user", "true"}).exit_code != 0) {
    GTEST_SKIP() << "unshare --user is not available here";
  }
  auto options = DaemonOptions();
  options.prefix = {"unshare", "--user", "--map-root-user", "--"};
  daemon_ = testing::DaemonProcess::Start(options);
  ASSERT_EQ(::chmod(socket_path().c_str(), 0666), 0);
  const int code = RunAs(65533, [&] {
    auto connected = client::DaemonClient::Connect(socket_path().string());
    if (!connected.ok()) return 10;
    if (!(*connected)->Info().ok()) return 11;
    auto created = (*connected)->CreateSession(std::nullopt);
    if (created.status().code() != common::StatusCode::kPermissionDenied) return 12;
    if (created.status().message().find("overflow uid") == std::string::npos) return 13;
    return 0;
  });
  EXPECT_EQ(code, 0) << "see the exit codes in the child; log:\n" << daemon_->log();
  // A mapped peer (root) still gets sessions.
  auto client = Connect();
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->CreateSession(std::nullopt).ok());
}

}  // namespace
}  // namespace niels::integration
