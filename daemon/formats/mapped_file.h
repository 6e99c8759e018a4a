#pragma once
// MappedFile: what every model file format read through a memory mapping has in common
// (SafetensorsFile, GgufFile), and MappedFileSet, the file(s) a loaded model's weights live in.
//
// The weights of a loaded model point straight into such mappings. A file rewritten in place
// under a running nielsd would show other weights (or SIGBUS where it was truncated), so the engine
// asks CheckUnchanged() before every generation. Replacing a file by renaming a new one over it is
// safe (the mapping keeps the old file) and is not reported.
//
// Immutable after construction; const methods are safe from any thread.

#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/status.h"

namespace niels::daemon::formats {

class MappedFile {
 public:
  virtual ~MappedFile() = default;

  virtual const std::filesystem::path& path() const = 0;
  // The mapped bytes of the whole file.
  virtual const std::byte* mapping_data() const = 0;
  virtual size_t mapping_size() const = 0;
  // OK while the file is as it was mapped; UNAVAILABLE naming it when it was modified in place
  // (its size or modification time changed).
  virtual common::Status CheckUnchanged() const = 0;
};

// The CheckUnchanged of a file open as `fd` that had `size` bytes and modification time `mtime`
// when it was mapped: UNAVAILABLE naming `path` when either changed. OK when fd < 0 or fstat fails
// (nothing to compare).
common::Status CheckFileUnchanged(int fd, const struct timespec& mtime, size_t size,
                                  const std::filesystem::path& path);

// The files a model's weights were loaded from (one, or the shards of a sharded checkpoint).
class MappedFileSet {
 public:
  explicit MappedFileSet(std::vector<std::shared_ptr<const MappedFile>> files) : files_(std::move(files)) {}

  const std::vector<std::shared_ptr<const MappedFile>>& files() const { return files_; }
  // The first file's CheckUnchanged() that is not OK; OK when all are.
  common::Status CheckUnchanged() const;
  // Total mapped bytes.
  size_t mapping_size() const;

 private:
  std::vector<std::shared_ptr<const MappedFile>> files_;
};

}  // namespace niels::daemon::formats
