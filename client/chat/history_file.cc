#include "client/chat/history_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>

#include <editline/readline.h>

namespace niels::client {

namespace fs = std::filesystem;

std::optional<std::string> DefaultHistoryPath(const char* xdg_state_home, const char* home) {
  if (xdg_state_home != nullptr && xdg_state_home[0] == '/') {
    return (fs::path(xdg_state_home) / "niels-chat" / "history").string();
  }
  if (home != nullptr && home[0] == '/') {
    return (fs::path(home) / ".local" / "state" / "niels-chat" / "history").string();
  }
  return std::nullopt;
}

HistoryFile::HistoryFile(std::string path, std::ostream& err) : path_(std::move(path)), err_(err) {
  using_history();
  stifle_history(kMaxEntries);
  if (path_.empty()) return;
  std::error_code ec;
  const fs::path dir = fs::path(path_).parent_path();
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (!ec) ::chmod(dir.c_str(), 0700);
  }
  if (ec) {
    Warn("cannot create " + dir.string() + ": " + ec.message());
    return;
  }
  if (fs::exists(path_, ec) && read_history(path_.c_str()) != 0) {
    Warn("cannot read " + path_ + ": " + std::strerror(errno));
  }
}

void HistoryFile::Add(const std::string& line) {
  add_history(line.c_str());
  if (path_.empty()) return;
  // Create the file 0600 before libedit writes it (write_history would use the umask), and keep
  // an existing file private too.
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    Warn("cannot write " + path_ + ": " + std::strerror(errno));
    return;
  }
  ::fchmod(fd, 0600);
  ::close(fd);
  if (write_history(path_.c_str()) != 0) Warn("cannot write " + path_ + ": " + std::strerror(errno));
}

void HistoryFile::Warn(const std::string& what) {
  if (warned_) return;
  warned_ = true;
  err_ << "niels-chat: history: " << what << std::endl;
}

}  // namespace niels::client
