// Daemon: shutdown while a stream is in flight (final CANCELLED delivered, socket file removed,
// exit code 0) and refusal of a second daemon on a live socket.
#include "daemon/server/daemon.h"

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
