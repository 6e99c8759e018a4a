#pragma once
// Test helpers that run real processes: DaemonProcess spawns nielsd (or a wrapper such as
// systemd-socket-activate in front of it) with its stderr in a log file, waits (bounded) until its
// socket accepts connections, and SIGTERMs it at the end; RunProcess runs a command to completion
// with the given stdin and captures stdout, stderr and the exit code.
//
// A sanitizer report in what a process wrote (its log, RunProcess's stderr) is a GoogleTest failure
// of the running test (ADD_FAILURE with the report), checked when the process has exited: in the
// sanitizer trees nielsd and niels-chat are instrumented, and a report at shutdown (a race while
// threads stop, a leak) would otherwise go unseen by every test that does not check the exit code.
//
// Failures to spawn throw std::runtime_error (GoogleTest reports it as a test failure). Every wait
// is bounded. Not thread-safe per object.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace niels::testing {

struct DaemonProcessOptions {
  std::string binary;                       // the nielsd binary (NIELSD_BINARY in integration tests)
  std::filesystem::path model_dir;          // --model
  std::filesystem::path socket_path;        // --socket (and what WaitUntilListening polls)
  std::vector<std::string> extra_args;      // appended after --model/--socket
  std::vector<std::string> prefix;          // run as prefix... binary args (e.g. systemd-socket-activate -l P)
  std::map<std::string, std::string> env;   // set in the child's environment. The state directory
                                            // is --state-dir <socket dir>/state unless env
                                            // (STATE_DIRECTORY, XDG_STATE_HOME), --state-dir or
                                            // --ephemeral choose otherwise
  std::filesystem::path log_file;           // stderr+stdout; default: <socket dir>/nielsd.log
  bool wait_until_listening = true;         // Start() waits for the socket to accept
  std::chrono::milliseconds timeout{30000}; // bound for starting and stopping
};

class DaemonProcess {
 public:
  // Spawns the process; when wait_until_listening, returns once a connect() to the socket succeeds
  // (throws if the process exits first or the timeout passes, with the log in the message).
  static std::unique_ptr<DaemonProcess> Start(DaemonProcessOptions options);
  ~DaemonProcess();  // Stop() if still running
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Polls connect() until it succeeds; false when the process exited or the timeout passed.
  bool WaitUntilListening(std::chrono::milliseconds timeout);
  // Sends SIGTERM and waits; returns the exit code (128 + signal when killed by a signal). After the
  // timeout the process is SIGKILLed and -1 returned.
  int Stop();
  // Waits for the process to exit by itself; exit code as Stop(), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  void Signal(int signal_number);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Everything the process wrote so far.
  std::string log() const;
  const std::filesystem::path& socket_path() const { return options_.socket_path; }

 private:
  explicit DaemonProcess(DaemonProcessOptions options) : options_(std::move(options)) {}
  // The process has exited: ADD_FAILURE for a sanitizer report in what it wrote to the log.
  void CheckLogAfterExit();

  DaemonProcessOptions options_;
  pid_t pid_ = -1;
  size_t log_start_ = 0;  // the log file's size before this process wrote to it (it appends)
};

// The first sanitizer report in `output` (AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer
// or ThreadSanitizer: each report ends with a line "SUMMARY: <name>Sanitizer: ..."): up to 8 KiB
// before that line, through it. Empty when there is none.
std::string SanitizerReport(std::string_view output);

// True when a connect() to the Unix socket at `path` succeeds right now.
bool CanConnect(const std::filesystem::path& path);

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed; -1 on timeout (the process is killed)
  std::string out;
  std::string err;
};

// Runs argv[0] with arguments, feeding `input` on stdin (then EOF), with `env` added to the
// environment. Bounded by `timeout`.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& input = "",
                         const std::map<std::string, std::string>& env = {},
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

}  // namespace niels::testing
