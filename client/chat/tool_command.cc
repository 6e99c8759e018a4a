#include "client/chat/tool_command.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

extern char** environ;

namespace niels::client {
namespace {

// Closes what it holds when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return true;
}

// Replaces every byte that is not part of a well-formed UTF-8 sequence with U+FFFD.
std::string ValidUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  std::size_t i = 0;
  while (i < in.size()) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    std::size_t len = 0;
    unsigned int min = 0;
    unsigned int cp = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= in.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(in[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(in.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

// Keeps SIGPIPE blocked on this thread while it lives, so that writing to a command that stopped
// reading gives EPIPE rather than ending niels-chat; a SIGPIPE raised meanwhile is consumed.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

}  // namespace

std::optional<ToolCommandResult> RunToolCommand(const std::string& command, const niels::v1::ToolCall& call,
                                                const std::function<bool()>& interrupted, std::string* error) {
  Fd stdin_read, stdin_write, stdout_read, stdout_write;
  if (!MakePipe(stdin_read, stdin_write) || !MakePipe(stdout_read, stdout_write)) {
    *error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_read.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stdout_write.get(), STDOUT_FILENO);
  // The child starts with default signal dispositions and an empty mask (SIGPIPE included,
  // which niels-chat ignores).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.starts_with("NIELS_TOOL_NAME=") || entry.starts_with("NIELS_TOOL_CALL_ID=")) continue;
    env_strings.emplace_back(entry);
  }
  env_strings.push_back("NIELS_TOOL_NAME=" + call.name());
  env_strings.push_back("NIELS_TOOL_CALL_ID=" + call.id());
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string shell = "/bin/sh", dash_c = "-c", script = command;
  char* argv[] = {shell.data(), dash_c.data(), script.data(), nullptr};

  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    *error = "cannot run /bin/sh: " + std::string(std::strerror(spawned));
    return std::nullopt;
  }
  stdin_read.Close();
  stdout_write.Close();
  ::fcntl(stdin_write.get(), F_SETFL, O_NONBLOCK);

  SigpipeBlocked sigpipe_blocked;
  ToolCommandResult result;
  const std::string& input = call.arguments();
  std::size_t written = 0;
  if (input.empty()) stdin_write.Close();
  bool stopped = false;
  char buffer[16384];
  while (stdout_read.get() >= 0) {
    if (interrupted && interrupted()) {
      ::kill(pid, SIGTERM);
      stopped = true;
      break;
    }
    pollfd fds[2];
    nfds_t n = 0;
    fds[n++] = {stdout_read.get(), POLLIN, 0};
    if (stdin_write.get() >= 0) fds[n++] = {stdin_write.get(), POLLOUT, 0};
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;  // Ctrl-C: checked at the top
      *error = std::string("poll: ") + std::strerror(errno);
      ::kill(pid, SIGTERM);
      stopped = true;
      break;
    }
    if (n == 2 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t w = ::write(stdin_write.get(), input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<std::size_t>(w);
      // A command that does not read all of its input (or has exited) gets no more.
      if (written == input.size() || (w < 0 && errno != EAGAIN && errno != EINTR)) stdin_write.Close();
    }
    if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      const ssize_t r = ::read(stdout_read.get(), buffer, sizeof buffer);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        stdout_read.Close();
        break;
      }
      const std::size_t room = kMaxToolOutputBytes - result.output.size();
      const std::size_t take = std::min(room, static_cast<std::size_t>(r));
      result.output.append(buffer, take);
      if (take < static_cast<std::size_t>(r)) result.cut = true;
    }
  }
  stdin_write.Close();
  stdout_read.Close();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (stopped) {
    if (error->empty()) *error = "interrupted";
    return std::nullopt;
  }
  if (interrupted && interrupted()) {
    *error = "interrupted";
    return std::nullopt;
  }
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (result.output.ends_with('\n')) result.output.pop_back();
  result.output = ValidUtf8(result.output);
  if (result.cut) result.output += "\n[output cut at " + std::to_string(kMaxToolOutputBytes) + " bytes]";
  if (WIFSIGNALED(status)) {
    result.output += "\n[the command was ended by signal " + std::to_string(WTERMSIG(status)) + "]";
  } else if (result.exit_status != 0) {
    result.output += "\n[the command failed with exit status " + std::to_string(result.exit_status) + "]";
  }
  return result;
}

std::function<std::optional<std::string>(const niels::v1::ToolCall&)> ToolCommandReader(
    std::string command, std::function<bool()> interrupted, std::ostream& err) {
  return [command = std::move(command), interrupted = std::move(interrupted),
          &err](const niels::v1::ToolCall& call) -> std::optional<std::string> {
    std::string error;
    auto result = RunToolCommand(command, call, interrupted, &error);
    if (!result) {
      err << "niels-chat: --tool-exec for " << call.name() << ": " << error << "; the turn ends" << std::endl;
      return std::nullopt;
    }
    err << "[tool result " << result->output.size() << " bytes, exit status " << result->exit_status << "]"
        << std::endl;
    return std::move(result->output);
  };
}

}  // namespace niels::client
