#include "daemon/state/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::state {
namespace fs = std::filesystem;

std::optional<std::string> RealEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

common::StatusOr<fs::path> ResolveStateDir(const std::string& flag, const EnvLookup& env) {
  if (!flag.empty()) return fs::path(flag);
  if (auto value = env("STATE_DIRECTORY"); value && !value->empty()) {
    const std::string first = value->substr(0, value->find(':'));
    if (fs::path(first).is_absolute()) return fs::path(first);
  }
  if (auto value = env("XDG_STATE_HOME"); value && fs::path(*value).is_absolute()) {
    return fs::path(*value) / "nielsd";
  }
  if (auto value = env("HOME"); value && fs::path(*value).is_absolute()) {
    return fs::path(*value) / ".local" / "state" / "nielsd";
  }
  return common::Status::InvalidArgument(
      "no state directory: none of STATE_DIRECTORY, XDG_STATE_HOME, HOME is set to an absolute path; "
      "pass --state-dir DIR or --ephemeral");
}

namespace {

common::Status DirError(const fs::path& dir, std::string_view what, int error) {
  return common::Status::InvalidArgument(fmt::format(
      "state directory {}: {}: {} (pass --state-dir DIR, or --ephemeral to keep sessions in memory only)",
      dir.string(), what, std::strerror(error)));
}

}  // namespace

common::Status PrepareStateDir(const fs::path& dir) {
  // Create missing components one by one with 0700 (umask may only remove bits).
  fs::path partial;
  for (const fs::path& part : dir) {
    partial /= part;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) return DirError(dir, "cannot create it", errno);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return DirError(dir, "cannot read it", errno);
  if (!S_ISDIR(st.st_mode)) return DirError(dir, "not a directory", ENOTDIR);
  const fs::path probe = dir / fmt::format(".nielsd-probe-{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return DirError(dir, "cannot write to it", errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return common::Status::Ok();
}

common::StatusOr<StateDirLock> StateDirLock::Acquire(const fs::path& dir) {
  const fs::path path = dir / "lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return DirError(dir, "cannot open its lock file", errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    const ssize_t got = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (error == EWOULDBLOCK) {
      std::string pid = got > 0 ? std::string(holder, static_cast<size_t>(got)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return common::Status::Unavailable(fmt::format(
          "state directory {} is in use by another nielsd{}; give each daemon its own --state-dir",
          dir.string(), pid.empty() ? "" : " (pid " + pid + ")"));
    }
    return DirError(dir, "cannot lock it", error);
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, pid.data(), pid.size(), 0);
  return StateDirLock(fd);
}

StateDirLock::StateDirLock(StateDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

StateDirLock& StateDirLock::operator=(StateDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace niels::daemon::state
