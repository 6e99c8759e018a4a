#pragma once
// Listener: owns the nielsd listening socket (a boost::asio local::stream_protocol acceptor).
//
// Open() either adopts a socket-activated fd (systemd's sd_listen_fds, e.g. nielsd.socket or
// systemd-socket-activate) or binds `socket_path` itself:
//   - a missing parent directory is created with mode 0700;
//   - an existing socket file nobody listens on (connect() fails with ECONNREFUSED) is stale and
//     replaced; a socket a live daemon listens on is never taken over (UNAVAILABLE,
//     "another nielsd is already listening on PATH"); a path that exists and is not a socket is
//     refused (INVALID_ARGUMENT);
//   - the socket file gets mode 0600, or 0660 and the given group (system unit, --socket-group).
// Close() (and the destructor) closes the acceptor and removes the socket file if Open() created it
// (never a socket-activated one: systemd owns that file).
//
// Threading: Open/Close from one thread (startup and shutdown); acceptor() is used by the daemon's
// accept loop on the io_context.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "common/status.h"

namespace niels::daemon::server {

struct ListenerOptions {
  /// Where to bind (already resolved: common::ResolveSocketPath). Ignored when socket-activated.
  std::string socket_path;
  /// Group name for the socket file; set: mode 0660 and chgrp, unset: mode 0600.
  std::optional<std::string> socket_group;
  /// Adopt a socket-activated fd when systemd passed one (LISTEN_FDS). Default true.
  bool allow_socket_activation = true;
  /// listen() backlog.
  int backlog = 128;
};

class Listener {
 public:
  using Acceptor = boost::asio::local::stream_protocol::acceptor;
  using Socket = boost::asio::local::stream_protocol::socket;

  /// Binds or adopts the listening socket (see the file comment). Errors: UNAVAILABLE when a live
  /// daemon listens on the path; INVALID_ARGUMENT for a bad path, a non-socket file in the way, an
  /// unknown group, or several socket-activated fds; INTERNAL for other system call failures (the
  /// message names the call, the path and errno's text).
  static common::StatusOr<std::unique_ptr<Listener>> Open(const boost::asio::any_io_executor& executor,
                                                          const ListenerOptions& options);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// The acceptor (open and listening until Close()).
  Acceptor& acceptor() { return acceptor_; }
  /// The socket path (for a socket-activated fd: the bound path as the kernel reports it).
  const std::string& path() const { return path_; }
  /// True when the fd came from socket activation.
  bool socket_activated() const { return socket_activated_; }
  /// Closes the acceptor and removes the socket file if this listener created it. Idempotent.
  void Close();

  /// The uid of the peer of a connected Unix socket (SO_PEERCRED). INTERNAL on failure.
  static common::StatusOr<uint32_t> PeerUid(Socket& socket);

 private:
  Listener(const boost::asio::any_io_executor& executor, std::string path, bool socket_activated);

  Acceptor acceptor_;
  std::string path_;
  bool socket_activated_ = false;
  bool owns_file_ = false;  // Open() bound the path: Close() unlinks it
  ino_t inode_ = 0;         // of the file Open() created: never unlink a successor's socket
};

}  // namespace niels::daemon::server
