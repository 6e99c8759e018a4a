// nielsd as a process: startup errors, stale socket replacement, refusal of a live socket, socket
// activation, sd_notify READY=1/STOPPING=1, and SIGTERM in the middle of a stream; and the test
// helpers' rule that a sanitizer report a spawned process writes fails the test.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest-spi.h>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

using std::chrono::milliseconds;

class ProcessTest : public IntegrationTest {};

// A Unix socket bound at `path` and closed without unlinking: what a crashed daemon leaves behind.
void MakeStaleSocket(const std::filesystem::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::close(fd);
}

TEST_F(ProcessTest, BadModelDirIsOneClearLineAndExitCode1) {
  testing::DaemonProcessOptions options = DaemonOptions();
  options.model_dir = dir_.path() / "no-such-model";
  options.wait_until_listening = false;
  auto daemon = testing::DaemonProcess::Start(options);
  std::optional<int> code = daemon->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(daemon->log().find("no-such-model"), std::string::npos) << daemon->log();
  EXPECT_FALSE(std::filesystem::exists(socket_path()));  // the bound socket was removed again
}

// A model directory whose config.json holds a value nested 200,000 levels deep where an integer
// belongs: one line naming the file and the limit, exit code 1. (nielsd died of SIGSEGV, exit 139,
// in a recursive dump of the value for its error message.)
TEST_F(ProcessTest, DeeplyNestedConfigIsOneClearLineAndExitCode1) {
  std::string config = testing::ReadFile(model_dir() / "config.json");
  config.erase(config.find_last_of('}'));
  testing::WriteFile(model_dir() / "config.json",
                     config + ", \"V\": " + std::string(200'000, '[') + std::string(200'000, ']') + "}");
  testing::DaemonProcessOptions options = DaemonOptions();
  options.wait_until_listening = false;
  auto daemon = testing::DaemonProcess::Start(options);
  std::optional<int> code = daemon->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1) << daemon->log();
  EXPECT_NE(daemon->log().find((model_dir() / "config.json").string() + ": nested deeper than 128 levels"),
            std::string::npos)
      << daemon->log();
}

TEST_F(ProcessTest, StaleSocketFileIsReplaced) {
  MakeStaleSocket(socket_path());
  ASSERT_TRUE(std::filesystem::is_socket(socket_path()));
  StartDaemon();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Info().ok());
  EXPECT_EQ(std::filesystem::status(socket_path()).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(ProcessTest, StartupLogStatesTheRealThreadSetup) {
  StartDaemon();  // --threads 1
  // The socket listens before the model loads; an answered Info means start-up has been logged.
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Info().ok());
  EXPECT_NE(daemon_->log().find("compute threads 1 ("), std::string::npos) << daemon_->log();
  EXPECT_NE(daemon_->log().find(" kernels)"), std::string::npos) << daemon_->log();
  EXPECT_EQ(daemon_->log().find("torch"), std::string::npos) << daemon_->log();
}

TEST_F(ProcessTest, SecondDaemonOnALiveSocketRefuses) {
  StartDaemon();
  testing::DaemonProcessOptions options = DaemonOptions();
  options.wait_until_listening = false;
  options.log_file = dir_.path() / "second.log";
  auto second = testing::DaemonProcess::Start(options);
  std::optional<int> code = second->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(second->log().find("another nielsd is already listening on " + socket_path().string()),
            std::string::npos)
      << second->log();
  auto client = Connect();  // the first one is untouched
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Info().ok());
}

TEST_F(ProcessTest, SocketActivation) {
  testing::DaemonProcessOptions options = DaemonOptions();
  options.prefix = {"systemd-socket-activate", "-l", socket_path().string()};
  // nielsd gets no --socket: the inherited fd is all it has.
  options.socket_path = socket_path();
  options.extra_args = {"--threads", "1", "--log-level", "debug"};
  auto daemon = testing::DaemonProcess::Start(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->Info();
  ASSERT_TRUE(info.ok()) << info.status().ToString() << "\n" << daemon->log();
  EXPECT_NE(daemon->log().find("socket-activated"), std::string::npos) << daemon->log();
  EXPECT_EQ(daemon->Stop(), 0) << daemon->log();
}

TEST_F(ProcessTest, NotifiesReadyAndStopping) {
  const std::filesystem::path notify_path = dir_.path() / "notify.sock";
  int notify_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, notify_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(notify_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  auto receive = [&](const std::string& wanted) {
    std::string all;
    for (int i = 0; i < 20; ++i) {
      pollfd p{notify_fd, POLLIN, 0};
      if (::poll(&p, 1, 30000) <= 0) break;
      char buffer[4096];
      ssize_t n = ::recv(notify_fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      std::string datagram(buffer, static_cast<size_t>(n));
      all += datagram + "|";
      if (datagram.find(wanted) != std::string::npos) return all;
    }
    return "NOT RECEIVED: " + all;
  };
  testing::DaemonProcessOptions options = DaemonOptions();
  options.env["NOTIFY_SOCKET"] = notify_path.string();
  daemon_ = testing::DaemonProcess::Start(options);
  std::string ready = receive("READY=1");
  EXPECT_EQ(ready.find("NOT RECEIVED"), std::string::npos) << ready;
  // READY=1 comes only once the socket accepts.
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Info().ok());
  daemon_->Signal(SIGTERM);
  std::string stopping = receive("STOPPING=1");
  EXPECT_EQ(stopping.find("NOT RECEIVED"), std::string::npos) << stopping;
  std::optional<int> code = daemon_->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  ::close(notify_fd);
}

TEST_F(ProcessTest, SigtermDuringAStreamExitsZeroAndRemovesTheSocket) {
  StartDaemon();
  auto client = Connect();
  auto info = client->Info();
  ASSERT_TRUE(info.ok());
  auto created = client->CreateSession(std::nullopt);
  ASSERT_TRUE(created.ok());
  niels::v1::ChatRequest request = GreedyChat(created->session_id(), "talk", 900);
  request.mutable_sampling()->add_banned_ids(info->eot_id());
  request.set_stream(true);
  int events = 0;
  auto reply = client->Chat(request, [&](const niels::v1::TokenEvent&) {
    if (++events == 2) daemon_->Signal(SIGTERM);
  });
  EXPECT_FALSE(reply.ok());  // cancelled by the shutdown (or the connection closed)
  std::optional<int> code = daemon_->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << daemon_->log();
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
}

TEST_F(ProcessTest, SigintAlsoStopsCleanly) {
  StartDaemon();
  daemon_->Signal(SIGINT);
  std::optional<int> code = daemon_->Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(std::filesystem::exists(socket_path()));
}

TEST_F(ProcessTest, MissingDefaultModelOrBadFlagsFail) {
  testing::ProcessResult version = testing::RunProcess({NIELSD_BINARY, "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("nielsd"), std::string::npos);
  testing::ProcessResult bad = testing::RunProcess({NIELSD_BINARY, "--threads", "zero"});
  EXPECT_NE(bad.exit_code, 0);
}

// A report of any of the four sanitizers is found by its SUMMARY line, with what precedes it; other
// lines that start alike are not reports.
TEST(SanitizerReportTest, FindsEachSanitizersSummaryAndNothingElse) {
  for (const char* name : {"ThreadSanitizer: data race engine.cc:12 in Step", "AddressSanitizer: heap-use-after-free x.cc:3",
                           "AddressSanitizer: 24 byte(s) leaked in 1 allocation(s).",
                           "UndefinedBehaviorSanitizer: undefined-behavior a.cc:5:7"}) {
    const std::string output = std::string("listening\nWARNING: the report\nSUMMARY: ") + name + "\nmore\n";
    const std::string report = testing::SanitizerReport(output);
    EXPECT_EQ(report, std::string("listening\nWARNING: the report\nSUMMARY: ") + name) << name;
  }
  EXPECT_EQ(testing::SanitizerReport("SUMMARY: 3 requests, 0 refused\nSUMMARY: not a Sanitizer: line\n"), "");
  EXPECT_EQ(testing::SanitizerReport(""), "");
}

// A process that writes a sanitizer report into its log fails the running test when it is seen to
// exit (Wait here; Stop and the destructor alike), even though its exit code is not checked.
TEST(SanitizerReportTest, AReportInADaemonsLogFailsTheTest) {
  testing::TempDir dir("niels_sanitizer_report_");
  testing::DaemonProcessOptions options;
  options.prefix = {"/bin/sh", "-c", "echo 'WARNING: ThreadSanitizer: data race (pid=1)' >&2; "
                                     "echo 'SUMMARY: ThreadSanitizer: data race engine.cc:12 in Step' >&2"};
  options.binary = "nielsd";  // $0 of the script
  options.log_file = dir.path() / "nielsd.log";
  options.extra_args = {"--ephemeral"};
  options.wait_until_listening = false;
  const auto run_to_exit = [&options] {
    auto process = testing::DaemonProcess::Start(options);
    EXPECT_EQ(process->Wait(milliseconds(30000)), std::optional<int>(0));
  };
  EXPECT_NONFATAL_FAILURE(run_to_exit(), "SUMMARY: ThreadSanitizer: data race engine.cc:12 in Step");
  // The same report on the stderr of a process run to completion.
  EXPECT_NONFATAL_FAILURE(testing::RunProcess({"/bin/sh", "-c", "echo 'SUMMARY: AddressSanitizer: SEGV x.cc:1' >&2"}),
                          "SUMMARY: AddressSanitizer: SEGV x.cc:1");
}

}  // namespace
}  // namespace niels::integration
