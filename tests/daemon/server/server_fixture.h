#pragma once
// Test plumbing for the server suite: a blocking raw-socket client that speaks frames (so tests can
// send broken bytes), and a fixture running a Daemon with a FakeService on a socket in a temp dir.
// Every wait is bounded (a hung server fails the test instead of hanging it).

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/frame.h"
#include "daemon/server/daemon.h"
#include "niels/v1/nielsd.pb.h"
#include "tests/daemon/server/fake_service.h"

namespace niels::daemon::server::testing {

inline constexpr int kWaitMs = 10000;

class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool WriteBytes(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool Send(const niels::v1::Request& request) { return WriteBytes(common::EncodeFrame(request)); }

  // The next response, or nullopt on EOF, error or timeout.
  std::optional<niels::v1::Response> Read(int timeout_ms = kWaitMs) {
    std::string payload;
    for (;;) {
      if (decoder_.Next(&payload) == common::FrameDecoder::Result::kFrame) {
        niels::v1::Response response;
        if (!response.ParseFromString(payload)) return std::nullopt;
        return response;
      }
      if (!Fill(timeout_ms)) return std::nullopt;
    }
  }

  // Reads responses until the final one (not a TokenEvent) for `request_id`; counts the events.
  std::optional<niels::v1::Response> ReadFinal(uint64_t request_id, int* events = nullptr) {
    for (;;) {
      std::optional<niels::v1::Response> response = Read();
      if (!response) return std::nullopt;
      if (response->request_id() != request_id) continue;
      if (response->has_token()) {
        if (events) ++*events;
        continue;
      }
      return response;
    }
  }

  // True when the server closes the connection (EOF or reset) within the wait.
  bool WaitForClose(int timeout_ms = kWaitMs) {
    for (;;) {
      if (!Fill(timeout_ms)) return eof_;
    }
  }

 private:
  bool Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buffer[65536];
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    decoder_.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  common::FrameDecoder decoder_{64u << 20};
};

inline niels::v1::Request InfoRequest(uint64_t id) {
  niels::v1::Request request;
  request.set_request_id(id);
  request.mutable_info();
  return request;
}

inline niels::v1::Request ChatRequest(uint64_t id, int tokens, bool stream, std::string text = "hi") {
  niels::v1::Request request;
  request.set_request_id(id);
  request.mutable_chat()->set_user_text(std::move(text));
  request.mutable_chat()->set_max_new_tokens(tokens);
  request.mutable_chat()->set_stream(stream);
  return request;
}

inline niels::v1::Request CancelRequest(uint64_t id, uint64_t target) {
  niels::v1::Request request;
  request.set_request_id(id);
  request.mutable_cancel()->set_target_request_id(target);
  return request;
}

// A fresh temp dir, removed at the end.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    char pattern[] = "/tmp/nielsd_server_XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs a Daemon with a FakeService on <tempdir>/nielsd.sock in a background thread.
class ServerTest : public ::testing::Test {
 protected:
  void StartServer(DaemonOptions options = {}) {
    options.listener.socket_path = socket_path();
    options.listener.allow_socket_activation = false;
    options.handle_signals = false;
    daemon_ = std::make_unique<Daemon>(options);
    common::Status listening = daemon_->Listen();
    ASSERT_TRUE(listening.ok()) << listening.ToString();
    serve_thread_ = std::thread([this] { exit_code_ = daemon_->Serve(engine_); });
  }

  void StopServer() {
    if (!daemon_) return;
    daemon_->RequestStop();
    if (serve_thread_.joinable()) serve_thread_.join();
    daemon_.reset();
  }

  void TearDown() override { StopServer(); }

  std::string socket_path() const { return (dir_.path() / "nielsd.sock").string(); }

  ScopedTempDir dir_;
  FakeService engine_;
  std::unique_ptr<Daemon> daemon_;
  std::thread serve_thread_;
  int exit_code_ = -1;
};

}  // namespace niels::daemon::server::testing
