#pragma once
// OutputFile: a file written front to back that appears at its path only when complete. The bytes
// go to an unnamed file in the target's directory (O_TMPFILE; where the file system has none, a
// hidden temporary name beside it, removed on failure); Commit() flushes it to disk and links it
// over the path in one rename. A writer that fails, is destroyed without Commit() or is killed
// leaves the path as it was (with O_TMPFILE, leaves nothing at all behind).
// Not thread-safe; one writer per file.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/status.h"

namespace niels::tools::quantize {

class OutputFile {
 public:
  // Creates the unnamed (or temporary) file in path's directory, mode 0666 minus the umask.
  // INVALID_ARGUMENT when the directory does not exist or `path` is a directory; INTERNAL when the
  // file cannot be created (the message names the path and the system's reason).
  static common::StatusOr<std::unique_ptr<OutputFile>> Create(const std::filesystem::path& path);
  ~OutputFile();  // discards the file unless committed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `size` bytes. INTERNAL (naming the path and the reason: disk full, ...) on failure.
  common::Status Append(const void* data, uint64_t size);
  // Appends `size` zero bytes.
  common::Status AppendZeros(uint64_t size);
  uint64_t size() const { return size_; }

  // fsync()s the file and puts it at the path, replacing what was there. INTERNAL on failure (the
  // path is then untouched). REQUIRES: called at most once.
  common::Status Commit();

 private:
  OutputFile(std::filesystem::path path, int fd, std::filesystem::path temporary)
      : path_(std::move(path)), fd_(fd), temporary_(std::move(temporary)) {}
  common::Status Error(const std::string& what) const;

  std::filesystem::path path_;
  int fd_ = -1;
  std::filesystem::path temporary_;  // empty for an O_TMPFILE file until Commit() names it
  uint64_t size_ = 0;
};

}  // namespace niels::tools::quantize
