#include "tests/support/daemon_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace niels::testing {
namespace {

using Clock = std::chrono::steady_clock;

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits for `pid` until the deadline; the exit code, or nullopt on timeout.
std::optional<int> WaitPid(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return DecodeStatus(status);
    if (done < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// In the child after fork: set the environment and exec; never returns.
[[noreturn]] void Exec(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

}  // namespace

std::string SanitizerReport(std::string_view output) {
  for (size_t at = output.find("SUMMARY: "); at != std::string_view::npos; at = output.find("SUMMARY: ", at + 1)) {
    const size_t line_end = std::min(output.find('\n', at), output.size());
    const std::string_view summary = output.substr(at, line_end - at);
    const size_t name_end = summary.find("Sanitizer:");
    // "SUMMARY: " then one word ending in "Sanitizer:" (AddressSanitizer, ThreadSanitizer, ...).
    if (name_end == std::string_view::npos || summary.substr(9, name_end - 9).find(' ') != std::string_view::npos) continue;
    const size_t start = at > 8192 ? at - 8192 : 0;
    return std::string(output.substr(start, line_end - start));
  }
  return {};
}

bool CanConnect(const std::filesystem::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

std::unique_ptr<DaemonProcess> DaemonProcess::Start(DaemonProcessOptions options) {
  if (options.log_file.empty()) options.log_file = options.socket_path.parent_path() / "nielsd.log";
  // Every test daemon keeps its sessions in its own temp dir (never the user's real state
  // directory), unless the test chose a state directory or --ephemeral itself.
  const bool chose_state =
      options.env.count("STATE_DIRECTORY") != 0 || options.env.count("XDG_STATE_HOME") != 0 ||
      std::any_of(options.extra_args.begin(), options.extra_args.end(), [](const std::string& arg) {
        return arg == "--state-dir" || arg.starts_with("--state-dir=") || arg == "--ephemeral";
      });
  if (!chose_state && !options.socket_path.empty()) {
    // A flag, not $STATE_DIRECTORY: a prefix such as systemd-socket-activate does not pass the
    // environment on.
    options.extra_args.push_back("--state-dir");
    options.extra_args.push_back((options.socket_path.parent_path() / "state").string());
  }
  std::vector<std::string> argv = options.prefix;
  argv.push_back(options.binary);
  if (!options.model_dir.empty()) {
    argv.push_back("--model");
    argv.push_back(options.model_dir.string());
  }
  if (!options.socket_path.empty()) {
    argv.push_back("--socket");
    argv.push_back(options.socket_path.string());
  }
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());

  std::unique_ptr<DaemonProcess> process(new DaemonProcess(options));
  std::error_code size_error;
  const uintmax_t log_size = std::filesystem::file_size(options.log_file, size_error);
  process->log_start_ = size_error ? 0 : static_cast<size_t>(log_size);
  int log_fd = ::open(options.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + options.log_file.string());
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, STDIN_FILENO);
    Exec(argv, options.env);
  }
  ::close(log_fd);
  process->pid_ = pid;
  if (options.wait_until_listening && !process->WaitUntilListening(options.timeout)) {
    std::string log = process->log();
    process->Stop();
    throw std::runtime_error("nielsd did not start listening on " + options.socket_path.string() +
                             "; its log:\n" + log);
  }
  return process;
}

DaemonProcess::~DaemonProcess() {
  if (running()) Stop();
}

bool DaemonProcess::WaitUntilListening(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (CanConnect(options_.socket_path)) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      CheckLogAfterExit();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void DaemonProcess::Signal(int signal_number) {
  if (running()) ::kill(pid_, signal_number);
}

std::optional<int> DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  if (!running()) return std::nullopt;
  std::optional<int> code = WaitPid(pid_, Clock::now() + timeout);
  if (code) {
    pid_ = -1;
    CheckLogAfterExit();
  }
  return code;
}

int DaemonProcess::Stop() {
  if (!running()) return -1;
  ::kill(pid_, SIGTERM);
  std::optional<int> code = Wait(options_.timeout);
  if (code) return *code;
  ::kill(pid_, SIGKILL);
  WaitPid(pid_, Clock::now() + std::chrono::seconds(10));
  pid_ = -1;
  CheckLogAfterExit();
  return -1;
}

void DaemonProcess::CheckLogAfterExit() {
  const std::string text = log();
  const std::string report = SanitizerReport(std::string_view(text).substr(std::min(log_start_, text.size())));
  if (!report.empty()) {
    ADD_FAILURE() << options_.binary << " (" << options_.log_file.string() << ") reported:\n" << report;
  }
}

std::string DaemonProcess::log() const {
  std::ifstream in(options_.log_file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& input,
                         const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(in_pipe[0], STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    Exec(argv, env);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::signal(SIGPIPE, SIG_IGN);
  ProcessResult result;
  size_t written = 0;
  int in_fd = in_pipe[1];
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  const auto deadline = Clock::now() + timeout;
  int open_outputs = 2;
  while (open_outputs > 0 && Clock::now() < deadline) {
    pollfd fds[3] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}, {in_fd, POLLOUT, 0}};
    ::poll(fds, in_fd >= 0 ? 3 : 2, 50);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        (i == 0 ? out_pipe[0] : err_pipe[0]) = -1;
        --open_outputs;
      }
    }
    if (in_fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = ::write(in_fd, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n <= 0 || written == input.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  for (int fd : {out_pipe[0], err_pipe[0]}) {
    if (fd >= 0) ::close(fd);
  }
  std::optional<int> code = WaitPid(pid, std::max(deadline, Clock::now() + std::chrono::seconds(2)));
  if (!code) {
    ::kill(pid, SIGKILL);
    WaitPid(pid, Clock::now() + std::chrono::seconds(10));
    result.exit_code = -1;
  } else {
    result.exit_code = *code;
  }
  const std::string report = SanitizerReport(result.err);
  if (!report.empty()) ADD_FAILURE() << argv[0] << " reported on its stderr:\n" << report;
  return result;
}

}  // namespace niels::testing
