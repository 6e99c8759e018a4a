#pragma once
// Shared setup for the integration suite: a tiny random model directory (TinyConfig with a longer
// context, so multi-turn chats fit without truncation) and a real nielsd process on a socket in a
// temp dir, plus helpers to connect with the real client library (client/daemon_client.h).
// ctest runs every test in its own process, so each test gets a fresh daemon.

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "client/daemon_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/test_model.h"

namespace niels::integration {

inline constexpr int64_t kContext = 1024;
// The random model's weights. Some seeds make a random model end every reply at once (eot is its
// argmax after any prompt), which the tests that compare non-empty replies cannot use; 8 does not.
inline constexpr uint64_t kModelSeed = 8;

inline daemon::model::ModelConfig IntegrationConfig() {
  daemon::model::ModelConfig config = testing::TinyConfig();
  config.context = kContext;
  return config;
}

class IntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::chmod(dir_.path().c_str(), 0755);
    testing::WriteModelDir(model_dir(), IntegrationConfig(), kModelSeed);
  }

  std::filesystem::path model_dir() const { return dir_.path() / "model"; }
  std::filesystem::path socket_path() const { return dir_.path() / "nielsd.sock"; }

  testing::DaemonProcessOptions DaemonOptions() const {
    testing::DaemonProcessOptions options;
    options.binary = NIELSD_BINARY;
    options.model_dir = model_dir();
    options.socket_path = socket_path();
    options.extra_args = {"--threads", "1"};
    return options;
  }

  void StartDaemon() { daemon_ = testing::DaemonProcess::Start(DaemonOptions()); }

  std::unique_ptr<client::DaemonClient> Connect() {
    auto connected = client::DaemonClient::Connect(socket_path().string());
    EXPECT_TRUE(connected.ok()) << connected.status().ToString();
    if (!connected.ok()) return nullptr;
    return std::move(connected).value();
  }

  testing::TempDir dir_{"nielsd_it_"};
  std::unique_ptr<testing::DaemonProcess> daemon_;
};

// A chat request with greedy sampling and a short reply.
inline niels::v1::ChatRequest GreedyChat(const std::string& session_id, const std::string& text,
                                         int max_new_tokens = 6) {
  niels::v1::ChatRequest request;
  request.set_session_id(session_id);
  request.set_user_text(text);
  request.mutable_sampling()->set_temperature(0);
  request.set_max_new_tokens(max_new_tokens);
  return request;
}

}  // namespace niels::integration
