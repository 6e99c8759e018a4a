#include "daemon/formats/atomic_write.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace niels::daemon::formats {

using common::Status;

Status WriteFileAtomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  std::filesystem::path temporary = path;
  temporary += ".tmp." + std::to_string(::getpid());
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (out) write(out);
  out.close();
  std::error_code ec;
  if (!out) {
    std::filesystem::remove(temporary, ec);
    return Status::Internal(path.string() + ": write failed");
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    return Status::Internal(path.string() + ": cannot rename the written file into place: " + ec.message());
  }
  return Status::Ok();
}

}  // namespace niels::daemon::formats
