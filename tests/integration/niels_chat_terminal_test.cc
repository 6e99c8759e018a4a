// niels-chat in a real terminal (a pseudo-terminal from forkpty) against a real nielsd: the prompt,
// the history file ($XDG_STATE_HOME/niels-chat/history, mode 0600) and recalling a line typed in an
// earlier run with the Up arrow, as a user would.
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

using namespace std::chrono_literals;

// niels-chat on the slave side of a pty; the test types on the master side and reads the screen.
class TerminalChat {
 public:
  TerminalChat(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    pid_ = ::forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ < 0) throw std::runtime_error(std::string("forkpty: ") + std::strerror(errno));
    if (pid_ == 0) {
      for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~TerminalChat() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
  }

  // Types `keys` once line editing is active. Until libedit has switched the terminal out of
  // canonical mode, the kernel's line discipline would take Ctrl-D as end-of-file and hand the
  // editor a NUL instead, and echo escape sequences as text.
  void Type(const std::string& keys) {
    WaitForLineEditing();
    ASSERT_EQ(::write(master_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
  }

  // Waits (bounded, draining output) until the terminal is in non-canonical mode: the pty master
  // reports the slave's termios.
  void WaitForLineEditing(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    termios mode {};
    while (::tcgetattr(master_, &mode) == 0 && (mode.c_lflag & ICANON) != 0 &&
           std::chrono::steady_clock::now() < deadline) {
      ReadUntil("\x01never\x01", 1, 20ms);
    }
  }

  // Reads until the screen output since the last call contains `marker` `count` times (bounded).
  bool ReadUntil(const std::string& marker, int count = 1, std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Count(marker) < count) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      pollfd fd{master_, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(master_, buffer, sizeof(buffer));
      if (n <= 0) return Count(marker) >= count;  // EIO: the child closed the terminal
      screen_.append(buffer, n);
    }
    return true;
  }

  // Waits for the process to exit; its exit code, or -1.
  int Wait(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      ReadUntil("\x01never\x01", 1, 50ms);  // keep draining so the child never blocks on output
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }

  const std::string& screen() const { return screen_; }

 private:
  int Count(const std::string& marker) const {
    int n = 0;
    for (size_t at = screen_.find(marker); at != std::string::npos; at = screen_.find(marker, at + 1)) {
      ++n;
    }
    return n;
  }

  int master_ = -1;
  pid_t pid_ = -1;
  std::string screen_;
};

class NielsChatTerminalTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
  }

  std::unique_ptr<TerminalChat> Chat() {
    return std::make_unique<TerminalChat>(
        std::vector<std::string>{NIELS_CHAT_BINARY, "--socket", socket_path().string(), "--greedy",
                                 "--max-new-tokens", "6", "--system", "you are terse."},
        std::map<std::string, std::string>{{"XDG_STATE_HOME", state_dir().string()}, {"TERM", "xterm"}});
  }

  std::filesystem::path state_dir() const { return dir_.path() / "state"; }
  std::filesystem::path history_file() const { return state_dir() / "niels-chat" / "history"; }

  std::string Reply(const std::string& line) {
    auto client = Connect();
    auto created = client->CreateSession(std::string("you are terse."));
    EXPECT_TRUE(created.ok());
    auto reply = client->Chat(GreedyChat(created->session_id(), line, 6));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    (void)client->DeleteSession(created->session_id());
    return reply.ok() ? reply->reply() : "<error>";
  }
};

TEST_F(NielsChatTerminalTest, HistoryPersistsAcrossRunsWithMode0600) {
  const std::string reply = Reply("tell me about the socket");
  ASSERT_FALSE(reply.empty());
  {
    auto chat = Chat();
    ASSERT_TRUE(chat->ReadUntil("> ")) << chat->screen();
    chat->Type("tell me about the socket\r");
    ASSERT_TRUE(chat->ReadUntil(reply)) << chat->screen();
    ASSERT_TRUE(chat->ReadUntil("> ", 2)) << chat->screen();
    chat->Type("\x04");  // Ctrl-D at the next prompt
    EXPECT_EQ(chat->Wait(), 0) << chat->screen();
  }
  struct stat st {};
  ASSERT_EQ(::stat(history_file().c_str(), &st), 0) << history_file();
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  struct stat dir_st {};
  ASSERT_EQ(::stat(history_file().parent_path().c_str(), &dir_st), 0);
  EXPECT_EQ(dir_st.st_mode & 0077, 0u);  // no group/other access to the directory
  // libedit escapes spaces in the file; the words are there.
  EXPECT_NE(testing::ReadFile(history_file()).find("socket"), std::string::npos);

  // A new run: Up recalls the line of the previous run, Enter sends it again.
  auto chat = Chat();
  ASSERT_TRUE(chat->ReadUntil("> ")) << chat->screen();
  chat->Type("\x1b[A");
  ASSERT_TRUE(chat->ReadUntil("tell me about the socket")) << chat->screen();
  chat->Type("\r");
  ASSERT_TRUE(chat->ReadUntil(reply)) << chat->screen();
  ASSERT_TRUE(chat->ReadUntil("> ", 2)) << chat->screen();
  chat->Type("/exit\r");
  EXPECT_EQ(chat->Wait(), 0) << chat->screen();
}

TEST_F(NielsChatTerminalTest, SlashCommandsAreRecordedButNeverSentToTheModel) {
  auto chat = Chat();
  ASSERT_TRUE(chat->ReadUntil("> ")) << chat->screen();
  chat->Type("/nonsense\r");
  ASSERT_TRUE(chat->ReadUntil("unknown command /nonsense")) << chat->screen();
  ASSERT_TRUE(chat->ReadUntil("> ", 2)) << chat->screen();
  chat->Type("/exit\r");
  EXPECT_EQ(chat->Wait(), 0) << chat->screen();
  auto client = Connect();
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->tokens_generated_total(), 0u);
  EXPECT_NE(testing::ReadFile(history_file()).find("/nonsense"), std::string::npos);
}

}  // namespace
}  // namespace niels::integration
