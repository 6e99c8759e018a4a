// Daemon: shutdown while a stream is in flight (final CANCELLED delivered, socket file removed,
// exit code 0), shutdown with requests not yet read and peers not yet accepted (each request
// answered), and refusal of a second daemon on a live socket.
#include "daemon/server/daemon.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/daemon/server/server_fixture.h"

namespace niels::daemon::server::testing {
namespace {

TEST_F(ServerTest, StopDuringAStreamFlushesCancelledAndRemovesTheSocket) {
  StartServer();
  engine_.token_gap = std::chrono::milliseconds(1);
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(ChatRequest(5, 1000000, /*stream=*/true)));
  ASSERT_TRUE(client.Read().has_value());
  daemon_->RequestStop();
  std::optional<niels::v1::Response> final_response = client.ReadFinal(5);
  ASSERT_TRUE(final_response.has_value());
  ASSERT_TRUE(final_response->has_error());
  EXPECT_EQ(final_response->error().code(), niels::v1::CANCELLED);
  EXPECT_TRUE(client.WaitForClose());
  serve_thread_.join();
  EXPECT_EQ(exit_code_, 0);
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
  EXPECT_FALSE(RawClient(socket_path()).connected());
}

// Requests sent before the stop, whether nielsd has read them or not, or even accepted their
// connection, each get a final response; none of these peers sees its connection reset.
TEST_F(ServerTest, StopAnswersEveryRequestSentBeforeIt) {
  constexpr int kClients = 5;
  constexpr int kPerClient = 40;
  DaemonOptions options;
  options.listener.socket_path = socket_path();
  options.listener.allow_socket_activation = false;
  options.handle_signals = false;
  daemon_ = std::make_unique<Daemon>(options);
  ASSERT_TRUE(daemon_->Listen().ok());
  // Nobody accepts yet: these peers wait in the listen backlog, their requests in their sockets.
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int c = 0; c < kClients; ++c) {
    auto client = std::make_unique<RawClient>(socket_path());
    ASSERT_TRUE(client->connected());
    std::string burst;
    for (int k = 0; k < kPerClient; ++k) burst += common::EncodeFrame(ChatRequest(100 + k, 3, /*stream=*/k % 2));
    ASSERT_TRUE(client->WriteBytes(burst));
    clients.push_back(std::move(client));
  }
  daemon_->RequestStop();  // before Serve(): it admits the backlog and shuts down at once
  serve_thread_ = std::thread([this] { exit_code_ = daemon_->Serve(engine_); });
  for (auto& client : clients) {
    std::vector<bool> answered(kPerClient, false);
    for (int finals = 0; finals < kPerClient;) {
      std::optional<niels::v1::Response> response = client->Read();
      ASSERT_TRUE(response.has_value()) << "only " << finals << " of " << kPerClient << " requests answered";
      if (response->has_token()) continue;
      const uint64_t k = response->request_id() - 100;
      ASSERT_LT(k, static_cast<uint64_t>(kPerClient));
      EXPECT_FALSE(answered[k]) << "two final responses for request " << response->request_id();
      answered[k] = true;
      ++finals;
    }
    EXPECT_TRUE(client->WaitForClose());
  }
  serve_thread_.join();
  EXPECT_EQ(exit_code_, 0);
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
}

TEST_F(ServerTest, SecondDaemonOnALiveSocketRefuses) {
  StartServer();
  DaemonOptions options;
  options.listener.socket_path = socket_path();
  options.listener.allow_socket_activation = false;
  Daemon second(options);
  common::Status status = second.Listen();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(socket_path()), std::string::npos) << status.message();
  // The first daemon is undisturbed.
  RawClient client(socket_path());
  ASSERT_TRUE(client.Send(InfoRequest(1)));
  EXPECT_TRUE(client.Read().has_value());
}

TEST_F(ServerTest, DaemonThatNeverServedRemovesItsSocketFile) {
  DaemonOptions options;
  options.listener.socket_path = socket_path();
  options.listener.allow_socket_activation = false;
  {
    Daemon daemon(options);
    ASSERT_TRUE(daemon.Listen().ok());
    EXPECT_TRUE(std::filesystem::is_socket(socket_path()));
  }  // e.g. the model failed to load
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
}

}  // namespace
}  // namespace niels::daemon::server::testing
