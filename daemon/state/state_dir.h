#pragma once
// Where nielsd keeps its state (docs/ARCHITECTURE.md, "Durable sessions"): the session database and
// the KV spill files.
//
// Resolution, first match wins: --state-dir > $STATE_DIRECTORY (systemd's StateDirectory=; when it
// lists several paths separated by ':', the first) > $XDG_STATE_HOME/nielsd >
// $HOME/.local/state/nielsd. Relative environment values are ignored (the XDG rule).
//
// Thread-safe (pure functions over their arguments and the file system).

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace niels::daemon::state {

// Reads an environment variable; nullopt when unset. Injected so tests need not touch the real
// environment.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> RealEnv(const char* name);

// The state directory by the rules above. INVALID_ARGUMENT when none applies (no flag, no usable
// variable, no HOME).
common::StatusOr<std::filesystem::path> ResolveStateDir(const std::string& flag, const EnvLookup& env = RealEnv);

// Creates `dir` (and missing parents) with mode 0700 and checks that it is a directory nielsd can
// write to (by creating and removing a probe file). An existing directory's mode is left alone.
// Errors (INVALID_ARGUMENT, naming the path and the OS error, with the hint to pass --state-dir or
// --ephemeral) when it cannot be created or written.
common::Status PrepareStateDir(const std::filesystem::path& dir);

// An exclusive lock on a state directory (flock on "<dir>/lock"), held while the object lives, so
// two daemons never share one directory. Movable.
class StateDirLock {
 public:
  // UNAVAILABLE naming the directory (and the holder's pid when known) when another process holds
  // it; INVALID_ARGUMENT when the lock file cannot be opened.
  static common::StatusOr<StateDirLock> Acquire(const std::filesystem::path& dir);
  StateDirLock(StateDirLock&& other) noexcept;
  StateDirLock& operator=(StateDirLock&& other) noexcept;
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;
  ~StateDirLock();

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace niels::daemon::state
