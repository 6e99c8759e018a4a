#include "daemon/server/daemon.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>

#include <csignal>
#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include "common/frame.h"
#include "common/log.h"
#include "common/wire_status.h"

namespace niels::daemon::server {

namespace asio = boost::asio;

namespace {
// Peers AdmitBacklog() accepts at most (the listen backlog holds 128 by default).
constexpr int kMaxAdmittedAtShutdown = 1024;
}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)), accept_strand_(asio::make_strand(io_context_)) {
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Daemon::~Daemon() {
  if (listener_) listener_->Close();
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

common::Status Daemon::Listen() {
  // From here on SIGTERM/SIGINT are queued for Serve() (which then shuts down at once), so a signal
  // while the model loads still ends with the socket file removed. Installed before the socket is
  // bound: a client may connect (and signal us) as soon as listen() returns.
  if (options_.handle_signals && !signals_) StartSignalHandling();
  common::StatusOr<std::unique_ptr<Listener>> listener = Listener::Open(accept_strand_, options_.listener);
  if (!listener.ok()) return listener.status();
  listener_ = std::move(listener).value();
  return common::Status::Ok();
}

std::string Daemon::socket_path() const { return listener_ ? listener_->path() : std::string(); }

void Daemon::RequestStop() {
  {
    std::lock_guard lock(stop_mutex_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

void Daemon::WaitForStopRequest() {
  std::unique_lock lock(stop_mutex_);
  stop_cv_.wait(lock, [this] { return stop_requested_; });
}

asio::awaitable<void> Daemon::AcceptLoop() {
  boost::system::error_code ec;
  for (;;) {
    Listener::Socket socket(asio::make_strand(io_context_));
    co_await listener_->acceptor().async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !listener_->acceptor().is_open()) co_return;
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {
        RefuseOneWithReserve();
      } else {
        static common::LogRateLimit limit("accept errors");
        common::LogWarnLimited(limit, "accept on {}: {}", listener_->path(), ec.message());
      }
      // Back off briefly instead of spinning while descriptors stay exhausted.
      asio::steady_timer pause(accept_strand_, std::chrono::milliseconds(10));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    Admit(std::move(socket));
  }
}

void Daemon::Admit(Listener::Socket socket) {
  // Per-connection warnings are rate-limited: a flood of connections must not fill the log.
  common::StatusOr<uint32_t> uid = Listener::PeerUid(socket);
  if (!uid.ok()) {
    static common::LogRateLimit limit("rejected connections");
    common::LogWarnLimited(limit, "rejecting a connection: {}", uid.status().ToString());
    return;
  }
  if (registry_.size() >= options_.max_connections) {
    static common::LogRateLimit limit("refused connections (--max-connections)");
    common::LogWarnLimited(limit, "refusing a connection of uid {}: {} connections open (--max-connections)",
                           *uid, registry_.size());
    Refuse(socket, fmt::format("nielsd has {} connections open, its limit (--max-connections); try "
                               "again later", registry_.size()));
    return;
  }
  if (registry_.CountFor(*uid) >= options_.max_connections_per_uid) {
    static common::LogRateLimit limit("refused connections (--max-connections-per-uid)");
    common::LogWarnLimited(limit, "refusing a connection of uid {}: it has {} open (--max-connections-per-uid)",
                           *uid, registry_.CountFor(*uid));
    Refuse(socket, fmt::format("uid {} has {} connections open to nielsd, the limit per user "
                               "(--max-connections-per-uid); close some first",
                               *uid, registry_.CountFor(*uid)));
    return;
  }
  if (options_.overflow_uid && *uid == *options_.overflow_uid) {
    static common::LogRateLimit limit("connections from the overflow uid");
    common::LogWarnLimited(limit, "connection from uid {}, the kernel's overflow uid: it cannot own sessions",
                           *uid);
  }
  common::LogDebug("connection from uid {}", *uid);
  auto connection = std::make_shared<Connection>(std::move(socket), *uid, DispatchTo(*dispatcher_), registry_,
                                                 options_.connection);
  connection->Start();
  if (shutting_down_) connection->Drain();
}

void Daemon::AdmitBacklog() {
  shutting_down_ = true;
  if (listener_->socket_activated()) return;
  const int listen_fd = listener_->acceptor().native_handle();
  // Never block here: the backlog may empty under us (the accept loop's pending accept).
  const int flags = ::fcntl(listen_fd, F_GETFL);
  if (flags < 0 || ::fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0) return;
  // Bounded: a peer that keeps connecting cannot hold the shutdown here.
  for (int admitted = 0; admitted < kMaxAdmittedAtShutdown; ++admitted) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: the backlog is empty; anything else: the remaining peers see a reset
    }
    Listener::Socket socket(asio::make_strand(io_context_));
    boost::system::error_code ec;
    socket.assign(asio::local::stream_protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      continue;
    }
    Admit(std::move(socket));
  }
}

void Daemon::Refuse(Listener::Socket& socket, const std::string& message) {
  registry_.CountRefused();
  niels::v1::Response response;
  response.set_request_id(0);
  *response.mutable_error() = common::ToProto(common::Status::ResourceExhausted(message));
  const std::string frame = common::EncodeFrame(response);
  // A fresh socket's send buffer is empty, so this small write does not block.
  (void)!::send(socket.native_handle(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  boost::system::error_code ignored;
  socket.shutdown(Listener::Socket::shutdown_both, ignored);
  socket.close(ignored);
}

void Daemon::RefuseOneWithReserve() {
  static common::LogRateLimit limit("accept: out of file descriptors");
  if (reserve_fd_ < 0) {
    common::LogWarnLimited(limit, "accept on {}: out of file descriptors", listener_->path());
    return;
  }
  ::close(reserve_fd_);
  int fd = ::accept4(listener_->acceptor().native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    Listener::Socket socket(accept_strand_);
    boost::system::error_code ec;
    socket.assign(asio::local::stream_protocol(), fd, ec);
    if (ec) {
      ::close(fd);
    } else {
      Refuse(socket, "nielsd is out of file descriptors; try again later");
    }
  }
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  common::LogWarnLimited(limit, "accept on {}: out of file descriptors (refused one connection; {} open)",
                         listener_->path(), registry_.size());
}

void Daemon::StartSignalHandling() {
  signals_ = std::make_unique<asio::signal_set>(io_context_, SIGTERM, SIGINT);
  signals_->async_wait([this](const boost::system::error_code& ec, int signal_number) {
    if (ec) return;
    common::LogInfo("received {}, shutting down", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
    RequestStop();
  });
}

int Daemon::Serve(RequestService& service) {
  dispatcher_ = std::make_unique<Dispatcher>(
      service, registry_,
      DispatcherOptions{.overflow_uid = options_.overflow_uid, .max_frame_bytes = options_.connection.max_frame_bytes});
  auto work = asio::make_work_guard(io_context_);
  // Logged before the first accept can run: a socket-activated listener may already hold clients in
  // its backlog, and they must not be answered before the log says where nielsd listens.
  common::LogInfo("listening on {}{}", listener_->path(),
                  listener_->socket_activated() ? " (socket-activated)" : "");
  asio::co_spawn(accept_strand_, AcceptLoop(), asio::detached);
  for (const std::unique_ptr<Front>& front : fronts_) front->Start(service);
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    io_threads_.emplace_back([this] { io_context_.run(); });
  }
  sd_notifyf(0, "READY=1\nSTATUS=listening on %s", listener_->path().c_str());
  WaitForStopRequest();
  sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
  Shutdown(service);
  work.reset();
  io_context_.stop();
  for (std::thread& thread : io_threads_) thread.join();
  io_threads_.clear();
  common::LogInfo("stopped");
  return 0;
}

void Daemon::Shutdown(RequestService& service) {
  // Stop accepting and remove the socket file (on the acceptor's strand).
  std::promise<void> closed;
  asio::post(accept_strand_, [this, &closed] {
    AdmitBacklog();
    listener_->Close();
    if (signals_) signals_->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  for (const std::unique_ptr<Front>& front : fronts_) front->StopAccepting();
  // In-flight work ends with a final CANCELLED, queued on the connections.
  service.Shutdown();
  // Each connection answers the requests its peer already sent (refused now), writes what it has,
  // then closes; the rest are force-closed at the deadline.
  registry_.DrainAll();
  for (const std::unique_ptr<Front>& front : fronts_) front->DrainAll();
  auto live = [this] {
    size_t count = registry_.size();
    for (const std::unique_ptr<Front>& front : fronts_) count += front->connection_count();
    return count;
  };
  auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  while (live() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  registry_.StopAll();
  for (const std::unique_ptr<Front>& front : fronts_) front->StopAll();
  deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (live() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace niels::daemon::server
