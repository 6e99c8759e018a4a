#include "daemon/formats/mapped_file.h"

namespace niels::daemon::formats {

common::Status CheckFileUnchanged(int fd, const struct timespec& mtime, size_t size,
                                  const std::filesystem::path& path) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return common::Status::Ok();
  if (static_cast<size_t>(st.st_size) != size || st.st_mtim.tv_sec != mtime.tv_sec ||
      st.st_mtim.tv_nsec != mtime.tv_nsec) {
    return common::Status::Unavailable(path.string() +
                                       " was modified in place while nielsd was using it; restart nielsd (to "
                                       "update a model, write a new file and rename it over the old one)");
  }
  return common::Status::Ok();
}

common::Status MappedFileSet::CheckUnchanged() const {
  for (const auto& file : files_) {
    common::Status status = file->CheckUnchanged();
    if (!status.ok()) return status;
  }
  return common::Status::Ok();
}

size_t MappedFileSet::mapping_size() const {
  size_t total = 0;
  for (const auto& file : files_) total += file->mapping_size();
  return total;
}

}  // namespace niels::daemon::formats
