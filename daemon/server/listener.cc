#include "daemon/server/listener.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/socket_path.h"

namespace niels::daemon::server {
namespace {

using common::Status;

std::string Errno(int error) { return std::strerror(error); }

Status SysError(const std::string& what, const std::string& path, int error) {
  return Status::Internal(what + " " + path + ": " + Errno(error));
}

// A closed-on-scope-exit fd.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

sockaddr_un MakeAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Creates the socket's parent directory (mode 0700) when it is missing.
Status EnsureParentDir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status::Ok();
  std::error_code ec;
  if (std::filesystem::exists(parent, ec)) return Status::Ok();
  if (parent.has_parent_path()) std::filesystem::create_directories(parent.parent_path(), ec);
  if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) {
    return SysError("cannot create the socket directory", parent.string(), errno);
  }
  return Status::Ok();
}

// An existing file at `path`: stale sockets are removed, anything else is refused.
Status ClearStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return SysError("cannot stat", path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return Status::InvalidArgument(path + " exists and is not a socket; remove it or choose another --socket");
  }
  Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe.get() < 0) return SysError("socket() for probing", path, errno);
  sockaddr_un address = MakeAddress(path);
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    return Status::Unavailable("another nielsd is already listening on " + path);
  }
  if (errno != ECONNREFUSED) return SysError("cannot check the existing socket", path, errno);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return SysError("cannot remove the stale socket", path, errno);
  }
  return Status::Ok();
}

Status SetSocketMode(const std::string& path, const std::optional<std::string>& group) {
  if (!group) {
    if (::chmod(path.c_str(), 0600) != 0) return SysError("chmod 0600", path, errno);
    return Status::Ok();
  }
  struct group* entry = ::getgrnam(group->c_str());
  if (entry == nullptr) return Status::InvalidArgument("unknown --socket-group '" + *group + "'");
  if (::chown(path.c_str(), static_cast<uid_t>(-1), entry->gr_gid) != 0) {
    return SysError("chgrp " + *group, path, errno);
  }
  if (::chmod(path.c_str(), 0660) != 0) return SysError("chmod 0660", path, errno);
  return Status::Ok();
}

// Binds and listens on `path`; returns the listening fd.
common::StatusOr<int> BindPath(const std::string& path, const ListenerOptions& options) {
  NIELS_RETURN_IF_ERROR(common::CheckSocketPathLength(path));
  NIELS_RETURN_IF_ERROR(EnsureParentDir(path));
  NIELS_RETURN_IF_ERROR(ClearStaleSocket(path));
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return SysError("socket() for", path, errno);
  sockaddr_un address = MakeAddress(path);
  mode_t old_mask = ::umask(0177);  // the file never exists with a wider mode than 0600
  int bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    if (bind_errno == EADDRINUSE) return Status::Unavailable("another nielsd is already listening on " + path);
    return SysError("cannot bind", path, bind_errno);
  }
  Status mode = SetSocketMode(path, options.socket_group);
  if (mode.ok() && ::listen(fd.get(), options.backlog) != 0) mode = SysError("listen on", path, errno);
  if (!mode.ok()) {
    ::unlink(path.c_str());
    return mode;
  }
  return fd.release();
}

// The path a listening Unix socket is bound to ("" for an unnamed or abstract socket).
std::string BoundPath(int fd) {
  sockaddr_un address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  if (length <= offsetof(sockaddr_un, sun_path) || address.sun_path[0] == '\0') return "";
  return std::string(address.sun_path, strnlen(address.sun_path, sizeof(address.sun_path)));
}

}  // namespace

Listener::Listener(const boost::asio::any_io_executor& executor, std::string path, bool socket_activated)
    : acceptor_(executor), path_(std::move(path)), socket_activated_(socket_activated) {}

Listener::~Listener() { Close(); }

common::StatusOr<std::unique_ptr<Listener>> Listener::Open(const boost::asio::any_io_executor& executor,
                                                           const ListenerOptions& options) {
  int activated = options.allow_socket_activation ? sd_listen_fds(/*unset_environment=*/1) : 0;
  if (activated < 0) return Status::Internal("sd_listen_fds: " + Errno(-activated));
  if (activated > 1) {
    return Status::InvalidArgument("socket activation passed " + std::to_string(activated) +
                                   " fds; nielsd expects exactly one Unix stream socket");
  }
  int fd = -1;
  std::string path = options.socket_path;
  if (activated == 1) {
    fd = SD_LISTEN_FDS_START;
    if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
      return Status::InvalidArgument("the socket-activated fd is not a listening Unix stream socket");
    }
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    std::string bound = BoundPath(fd);
    if (!bound.empty()) path = bound;
  } else {
    common::StatusOr<int> bound = BindPath(path, options);
    if (!bound.ok()) return bound.status();
    fd = *bound;
  }
  std::unique_ptr<Listener> listener(new Listener(executor, path, activated == 1));
  listener->owns_file_ = activated == 0;
  struct stat st {};
  if (activated == 0 && ::lstat(path.c_str(), &st) == 0) listener->inode_ = st.st_ino;
  boost::system::error_code ec;
  listener->acceptor_.assign(boost::asio::local::stream_protocol(), fd, ec);
  if (ec) {
    ::close(fd);
    return Status::Internal("cannot adopt the listening socket " + path + ": " + ec.message());
  }
  return listener;
}

void Listener::Close() {
  boost::system::error_code ignored;
  if (acceptor_.is_open()) acceptor_.close(ignored);
  if (owns_file_) {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0 && st.st_ino == inode_) ::unlink(path_.c_str());
    owns_file_ = false;
  }
}

common::StatusOr<uint32_t> Listener::PeerUid(Socket& socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return Status::Internal("SO_PEERCRED: " + Errno(errno));
  }
  return static_cast<uint32_t>(credentials.uid);
}

}  // namespace niels::daemon::server
