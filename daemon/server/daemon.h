#pragma once
// Daemon: the nielsd server process minus flag parsing. Owns the io_context (N IO threads), the
// Listener, the ConnectionRegistry, the Dispatcher and the signal_set.
//
// Lifecycle (main.cc): Listen() first, so a second nielsd on a live socket fails before loading a
// model; then load the model and Serve(service), which blocks:
//   - accepts connections (peer uid from SO_PEERCRED) and serves them on the IO threads; a peer over
//     max_connections (all peers) or max_connections_per_uid (its uid) gets one RESOURCE_EXHAUSTED
//     Response (request_id 0) and is closed. When nielsd runs out of file descriptors (EMFILE), it
//     frees a reserved descriptor, accepts the waiting peer, answers it the same way and closes it,
//     so the backlog drains and accepting resumes as soon as descriptors are free again;
//   - sends sd_notify READY=1 once it accepts (harmless without $NOTIFY_SOCKET);
//   - on SIGTERM/SIGINT (when handle_signals) or RequestStop(): STOPPING=1; admits the peers
//     already waiting in the listen backlog (unless socket-activated: systemd keeps those for the
//     next nielsd), stops accepting and removes the socket file; service.Shutdown() (in-flight work
//     gets its final CANCELLED); then every connection answers each request its peer had sent
//     before (refused: UNAVAILABLE), writes its queued output and closes (all bounded by
//     drain_timeout); joins the IO threads and returns 0.
// The destructor closes the listener (and removes its socket file) if Serve() never ran.
//
// Threading: Listen() and Serve() on one thread (main); RequestStop() from any thread.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <utility>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>

#include "common/status.h"
#include "daemon/server/request_service.h"
#include "daemon/server/connection.h"
#include "daemon/server/connection_registry.h"
#include "daemon/server/dispatcher.h"
#include "daemon/server/front.h"
#include "daemon/server/listener.h"

namespace niels::daemon::server {

struct DaemonOptions {
  /// Socket path, group, socket activation.
  ListenerOptions listener;
  /// Per-connection limits (frame size, output bound).
  ConnectionOptions connection;
  /// Boost.Asio IO threads. Default 2.
  int io_threads = 2;
  /// Install SIGTERM/SIGINT handlers in Serve(). Default true (tests turn it off).
  bool handle_signals = true;
  /// How long Serve() waits for connections to flush their output at shutdown. Default 2 s.
  std::chrono::milliseconds drain_timeout{2000};
  /// Live connections at most, all peers together. Default 1000.
  size_t max_connections = 1000;
  /// Live connections at most for one peer uid. Default 64.
  size_t max_connections_per_uid = 64;
  /// The kernel's overflow uid (see Dispatcher); unset: none is refused.
  std::optional<uint32_t> overflow_uid;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// Binds (or adopts) the socket; errors as Listener::Open. Call once, before Serve().
  common::Status Listen();
  /// Serves until a signal or RequestStop(), then shuts down as described above; returns the
  /// process exit code (0). REQUIRES: Listen() succeeded. `service` must outlive the call.
  int Serve(RequestService& service);
  /// Makes Serve() shut down and return. Thread-safe; may be called before Serve() starts.
  void RequestStop();

  /// The socket path (after Listen()).
  std::string socket_path() const;
  /// Live connections of the protobuf socket.
  size_t connection_count() const { return registry_.size(); }

  /// The io_context the IO threads run (a front opens its listener on it). Before Serve().
  boost::asio::io_context& io_context() { return io_context_; }
  /// Adds a front (the HTTP socket) that Serve() starts and Shutdown() stops with the protobuf
  /// socket: it stops accepting when the socket does, drains within the same drain_timeout and is
  /// closed at its end. Before Serve().
  void AddFront(std::unique_ptr<Front> front) { fronts_.push_back(std::move(front)); }

 private:
  boost::asio::awaitable<void> AcceptLoop();
  // Checks an accepted peer against the limits and starts its Connection (or refuses it).
  // REQUIRES: accept strand.
  void Admit(Listener::Socket socket);
  // Shutdown: admits every peer waiting in the listen backlog, so the requests they already sent
  // get answers instead of a reset connection. REQUIRES: accept strand.
  void AdmitBacklog();
  // Out of descriptors: accepts one waiting peer with the reserved descriptor and refuses it.
  void RefuseOneWithReserve();
  // Answers `socket` with one RESOURCE_EXHAUSTED Response carrying `message`, then closes it, and
  // counts the refusal (Stats.connections_refused_total).
  void Refuse(Listener::Socket& socket, const std::string& message);
  void StartSignalHandling();
  void WaitForStopRequest();
  void Shutdown(RequestService& service);

  const DaemonOptions options_;
  boost::asio::io_context io_context_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<boost::asio::signal_set> signals_;
  ConnectionRegistry registry_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::vector<std::unique_ptr<Front>> fronts_;
  std::vector<std::thread> io_threads_;
  int reserve_fd_ = -1;  // /dev/null, given up to accept one peer when descriptors run out
  bool shutting_down_ = false;  // accept strand only: connections admitted from now on drain at once

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;  // GUARDED_BY(stop_mutex_)
};

}  // namespace niels::daemon::server
