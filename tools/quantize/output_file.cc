#include "tools/quantize/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace niels::tools::quantize {

using common::Status;
using common::StatusOr;

namespace {

std::filesystem::path DirectoryOf(const std::filesystem::path& path) {
  const std::filesystem::path parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

// A hidden temporary name beside `path`: ".NAME.tmp-PID-TAG".
std::filesystem::path TemporaryName(const std::filesystem::path& path, int tag) {
  return DirectoryOf(path) / fmt::format(".{}.tmp-{}-{}", path.filename().string(), ::getpid(), tag);
}

}  // namespace

StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::filesystem::path& path) {
  const std::filesystem::path dir = DirectoryOf(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument(path.string() + ": the directory " + dir.string() + " does not exist");
  }
  if (std::filesystem::is_directory(path, ec)) return Status::InvalidArgument(path.string() + ": is a directory");
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  std::filesystem::path temporary;
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE on this file system: a named temporary file, unlinked on failure.
    for (int attempt = 0; attempt < 100; ++attempt) {
      temporary = TemporaryName(path, attempt);
      fd = ::open(temporary.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
      if (fd >= 0 || errno != EEXIST) break;
    }
  }
  if (fd < 0) return Status::Internal(path.string() + ": cannot create the output: " + std::strerror(errno));
  return std::unique_ptr<OutputFile>(new OutputFile(path, fd, std::move(temporary)));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
  }
}

Status OutputFile::Error(const std::string& what) const {
  return Status::Internal(path_.string() + ": " + what + ": " + std::strerror(errno));
}

Status OutputFile::Append(const void* data, uint64_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, std::min<uint64_t>(size, uint64_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error("write failed");
    p += n;
    size -= static_cast<uint64_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status OutputFile::AppendZeros(uint64_t size) {
  const char zeros[4096] = {};
  while (size > 0) {
    const uint64_t n = std::min<uint64_t>(size, sizeof zeros);
    NIELS_RETURN_IF_ERROR(Append(zeros, n));
    size -= n;
  }
  return Status::Ok();
}

Status OutputFile::Commit() {
  if (::fsync(fd_) != 0) return Error("fsync failed");
  if (temporary_.empty()) {
    // Give the unnamed file a temporary name (linkat through /proc needs no privilege), then rename.
    const std::filesystem::path name = TemporaryName(path_, 1000 + fd_);  // the open fd makes it unique
    const std::string proc = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return Error("cannot link the output into its directory");
    }
    temporary_ = name;
  }
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) return Error("cannot rename the output into place");
  ::close(fd_);
  fd_ = -1;
  temporary_.clear();
  return Status::Ok();
}

}  // namespace niels::tools::quantize
