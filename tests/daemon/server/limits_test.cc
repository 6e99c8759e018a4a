// What a hostile or careless client can make the server hold, and what it gets instead: the reply
// backlog (every frame counted; the reader pauses; the connection closes if it stays full), started
// frames that never finish, connection limits, oversized responses, duplicate-id cancels, and
// exceptions in a connection's coroutines. Each test fails on a server without the rule it checks.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/server/connection.h"
#include "daemon/server/connection_registry.h"
#include "daemon/server/dispatcher.h"
#include "tests/daemon/server/server_fixture.h"

namespace niels::daemon::server::testing {
namespace {

using Clock = std::chrono::steady_clock;

// A client that writes zero-length frames (each one answered UNIMPLEMENTED) as fast as it can and
// never reads. Returns the bytes it managed to write before the daemon stopped taking them, and
// whether the daemon closed the connection, within `limit`.
struct FloodResult {
  size_t written = 0;
  bool closed = false;
};

FloodResult FloodWithoutReading(const std::string& socket_path, Clock::duration limit) {
  RawClient client(socket_path);
  EXPECT_TRUE(client.connected());
  int fd = client.fd();
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const std::string zeros(4096, '\0');  // 4096 empty frames
  FloodResult result;
  const Clock::time_point end = Clock::now() + limit;
  while (Clock::now() < end) {
    ssize_t n = ::send(fd, zeros.data(), zeros.size(), MSG_NOSIGNAL);
    if (n > 0) {
      result.written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    result.closed = true;  // EPIPE / ECONNRESET: the daemon closed it
    break;
  }
  return result;
}

TEST_F(ServerTest, ClientThatNeverReadsItsRepliesIsPausedThenClosed) {
  DaemonOptions options;
  options.connection.max_queued_bytes = 64 << 10;
  options.connection.max_queued_frames = 1024;
  options.connection.backlog_timeout = std::chrono::milliseconds(500);
  StartServer(options);
  FloodResult flood = FloodWithoutReading(socket_path(), std::chrono::seconds(6));
  // Paused: the daemon stopped reading, so the client could only fill the socket buffers (a few
  // hundred KiB); an unpaused daemon reads and answers everything (tens of MiB in 6 s).
  EXPECT_LT(flood.written, 4u << 20) << "the daemon kept reading from a client that reads nothing";
  EXPECT_TRUE(flood.closed) << "the connection was not closed after the backlog timeout";
  // Everyone else is still served.
  RawClient other(socket_path());
  ASSERT_TRUE(other.Send(InfoRequest(1)));
  auto reply = other.ReadFinal(1);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->has_info());
}

TEST_F(ServerTest, ARepliesBacklogThatDrainsKeepsTheConnection) {
  DaemonOptions options;
  options.connection.max_queued_frames = 16;
  options.connection.backlog_timeout = std::chrono::seconds(30);
  StartServer(options);
  RawClient client(socket_path());
  std::string many;
  for (uint64_t id = 1; id <= 200; ++id) many += common::EncodeFrame(InfoRequest(id));
  ASSERT_TRUE(client.WriteBytes(many));
  // All 200 are answered (the reader pauses at 16 queued replies and resumes as they are read).
  for (uint64_t id = 1; id <= 200; ++id) {
    auto reply = client.Read();
    ASSERT_TRUE(reply.has_value()) << "reply " << id;
    EXPECT_TRUE(reply->has_info());
  }
}

TEST_F(ServerTest, StartedFrameThatNeverCompletesIsClosed) {
  DaemonOptions options;
  options.connection.frame_timeout = std::chrono::milliseconds(300);
  StartServer(options);
  RawClient slow(socket_path());
  ASSERT_TRUE(slow.WriteBytes(std::string("\x64", 1) + "0123456789"));  // 100-byte frame, 10 sent
  EXPECT_TRUE(slow.WaitForClose(5000));
  // A connection that is merely idle between frames stays open.
  RawClient idle(socket_path());
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  ASSERT_TRUE(idle.Send(InfoRequest(3)));
  auto reply = idle.ReadFinal(3);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->has_info());
}

// Reads the single refusal a connection over a limit gets, and checks that it is closed after it.
void ExpectRefused(const std::string& socket_path, const std::string& flag) {
  RawClient refused(socket_path);
  ASSERT_TRUE(refused.connected());
  auto reply = refused.Read(5000);
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->has_error());
  EXPECT_EQ(reply->error().code(), niels::v1::RESOURCE_EXHAUSTED);
  EXPECT_NE(reply->error().message().find(flag), std::string::npos) << reply->error().message();
  EXPECT_TRUE(refused.WaitForClose(5000));
}

// Waits until the daemon counts `count` live connections.
void WaitForConnections(const Daemon& daemon, size_t count) {
  const Clock::time_point end = Clock::now() + std::chrono::seconds(5);
  while (daemon.connection_count() != count && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(daemon.connection_count(), count);
}

TEST_F(ServerTest, ConnectionsPerUidAreLimited) {
  DaemonOptions options;
  options.max_connections_per_uid = 2;
  StartServer(options);
  auto first = std::make_unique<RawClient>(socket_path());
  RawClient second(socket_path());
  WaitForConnections(*daemon_, 2);
  ExpectRefused(socket_path(), "--max-connections-per-uid");
  first.reset();  // closing one makes room
  WaitForConnections(*daemon_, 1);
  RawClient third(socket_path());
  ASSERT_TRUE(third.Send(InfoRequest(1)));
  EXPECT_TRUE(third.ReadFinal(1).has_value());
}

TEST_F(ServerTest, ConnectionsInAllAreLimited) {
  DaemonOptions options;
  options.max_connections = 3;
  StartServer(options);
  std::vector<std::unique_ptr<RawClient>> open;
  for (int i = 0; i < 3; ++i) open.push_back(std::make_unique<RawClient>(socket_path()));
  WaitForConnections(*daemon_, 3);
  ExpectRefused(socket_path(), "--max-connections");
}

// A flood of connections over the limit: each one is refused and counted in Stats, but the log gets
// at most one rate limit's burst (10) of refusal warnings, not one line per connection.
TEST_F(ServerTest, RefusedConnectionsAreCountedAndTheirWarningsRateLimited) {
  DaemonOptions options;
  options.max_connections = 1;
  StartServer(options);
  RawClient holder(socket_path());
  WaitForConnections(*daemon_, 1);
  constexpr int kFlood = 60;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kFlood; ++i) ExpectRefused(socket_path(), "--max-connections");
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t warnings = 0;
  for (size_t at = log.find("refusing a connection"); at != std::string::npos;
       at = log.find("refusing a connection", at + 1)) {
    ++warnings;
  }
  EXPECT_GE(warnings, 1u);
  EXPECT_LE(warnings, 10u) << log;
  niels::v1::Request stats;
  stats.set_request_id(5);
  stats.mutable_stats();
  ASSERT_TRUE(holder.Send(stats));
  auto reply = holder.ReadFinal(5);
  ASSERT_TRUE(reply.has_value() && reply->has_stats());
  EXPECT_EQ(reply->stats().connections_refused_total(), static_cast<uint64_t>(kFlood));
  EXPECT_EQ(reply->stats().connections(), 1u);
}

TEST_F(ServerTest, ResponseOverTheLimitBecomesResourceExhausted) {
  DaemonOptions options;
  options.connection.max_response_bytes = 2000;
  StartServer(options);
  RawClient client(socket_path());
  // The fake pads each token's text to the user text's length: 3 tokens of 1000 bytes.
  ASSERT_TRUE(client.Send(ChatRequest(1, 3, /*stream=*/false, std::string(1000, 'x'))));
  auto reply = client.ReadFinal(1);
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->has_error()) << reply->DebugString().substr(0, 200);
  EXPECT_EQ(reply->error().code(), niels::v1::RESOURCE_EXHAUSTED);
  // A small reply on the same connection is unaffected.
  ASSERT_TRUE(client.Send(ChatRequest(2, 3, /*stream=*/false)));
  reply = client.ReadFinal(2);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->has_chat());
}

TEST_F(ServerTest, CancelWithTheIdOfAnInFlightRequestIsRefusedNotCarriedOut) {
  engine_.token_gap = std::chrono::milliseconds(20);
  StartServer();
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(ChatRequest(5, 20, /*stream=*/true)));
  ASSERT_TRUE(client.Read().has_value());  // the first token: request 5 is in flight
  ASSERT_TRUE(client.Send(CancelRequest(5, 5)));
  int events = 0;
  bool saw_refusal = false;
  std::optional<niels::v1::Response> final_response;
  while (!final_response) {
    auto reply = client.Read();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->request_id(), 5u);
    if (reply->has_token()) {
      ++events;
    } else if (reply->has_error() && reply->error().code() == niels::v1::INVALID_ARGUMENT) {
      saw_refusal = true;
    } else {
      final_response = reply;
    }
  }
  EXPECT_TRUE(saw_refusal);
  EXPECT_TRUE(final_response->has_chat()) << "the chat was cancelled by a refused Cancel";
  Outcome outcome{};
  ASSERT_TRUE(engine_.WaitForOutcome(5, &outcome));
  EXPECT_EQ(outcome, Outcome::kCompleted);
}

// A request whose final response has been queued is no longer cancellable: Cancel reports
// found = false even before the final response has been written.
TEST(ConnectionTest, CancelAfterTheFinalResponseWasQueuedReportsNotFound) {
  boost::asio::io_context io;  // never run: the posted writes stay queued
  auto strand = boost::asio::make_strand(io);
  Connection::Socket ours(strand), theirs(io);
  boost::asio::local::connect_pair(ours, theirs);
  FakeService engine;
  ConnectionRegistry registry;
  Dispatcher dispatcher(engine, registry, DispatcherOptions{});
  auto connection =
      std::make_shared<Connection>(std::move(ours), 0, DispatchTo(dispatcher), registry, ConnectionOptions{});
  auto tracked = connection->Track(7);
  ASSERT_TRUE(tracked.has_value());
  EXPECT_FALSE(connection->Track(7).has_value()) << "an id in flight is not tracked twice";
  auto cancel = tracked->cancel;
  auto sink = tracked->sink;
  niels::v1::Response done;
  done.mutable_info();
  ASSERT_TRUE(sink->Send(done, /*final=*/true));
  EXPECT_FALSE(connection->CancelRequest(7));
  EXPECT_FALSE(cancel->load());
}

TEST_F(ServerTest, ExceptionInAConnectionClosesIt) {
  engine_.throw_on_stats = true;
  StartServer();
  RawClient client(socket_path());
  niels::v1::Request stats;
  stats.set_request_id(1);
  stats.mutable_stats();
  ASSERT_TRUE(client.Send(stats));
  EXPECT_TRUE(client.WaitForClose(5000));
  WaitForConnections(*daemon_, 0);  // not leaked
  RawClient other(socket_path());
  ASSERT_TRUE(other.Send(InfoRequest(1)));
  EXPECT_TRUE(other.ReadFinal(1).has_value());
}

TEST_F(ServerTest, OverflowUidGetsNoSessions) {
  DaemonOptions options;
  options.overflow_uid = ::getuid();  // the test process plays a peer whose uid is not mapped
  StartServer(options);
  RawClient client(socket_path());
  niels::v1::Request create;
  create.set_request_id(1);
  create.mutable_create_session();
  ASSERT_TRUE(client.Send(create));
  auto reply = client.ReadFinal(1);
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->has_error());
  EXPECT_EQ(reply->error().code(), niels::v1::PERMISSION_DENIED);
  EXPECT_NE(reply->error().message().find("overflow uid"), std::string::npos) << reply->error().message();
  niels::v1::Request fork;
  fork.set_request_id(2);
  fork.mutable_fork_session()->set_session_id("0123");
  ASSERT_TRUE(client.Send(fork));
  reply = client.ReadFinal(2);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->error().code(), niels::v1::PERMISSION_DENIED);
  // Requests that own nothing still work.
  ASSERT_TRUE(client.Send(InfoRequest(3)));
  reply = client.ReadFinal(3);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->has_info());
  EXPECT_TRUE(engine_.submitted().size() == 1u) << "create/fork reached the engine";
}

TEST(OverflowUidTest, ReadsTheKernelsValue) {
  std::optional<uint32_t> uid = ReadOverflowUid();
  ASSERT_TRUE(uid.has_value());
  EXPECT_EQ(*uid, 65534u);  // Linux's default; nothing here changes it
  EXPECT_FALSE(ReadOverflowUid("/nonexistent/overflowuid").has_value());
}

}  // namespace
}  // namespace niels::daemon::server::testing
