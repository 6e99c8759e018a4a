#include "daemon/server/daemon.h"

#include <systemd/sd-daemon.h>

#include <csignal>
#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.h"

namespace niels::daemon::server {

namespace asio = boost::asio;

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)), accept_strand_(asio::make_strand(io_context_)) {}

Daemon::~Daemon() {
  if (listener_) listener_->Close();
}

common::Status Daemon::Listen() {
  common::StatusOr<std::unique_ptr<Listener>> listener = Listener::Open(accept_strand_, options_.listener);
  if (!listener.ok()) return listener.status();
  listener_ = std::move(listener).value();
  // From here on SIGTERM/SIGINT are queued for Serve() (which then shuts down at once), so a signal
  // while the model loads still ends with the socket file removed.
  if (options_.handle_signals) StartSignalHandling();
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
      // EMFILE and friends: back off briefly instead of spinning.
      common::LogWarn("accept on {}: {}", listener_->path(), ec.message());
      asio::steady_timer pause(accept_strand_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    common::StatusOr<uint32_t> uid = Listener::PeerUid(socket);
    if (!uid.ok()) {
      common::LogWarn("rejecting a connection: {}", uid.status().ToString());
      continue;
    }
    common::LogDebug("connection from uid {}", *uid);
    std::make_shared<Connection>(std::move(socket), *uid, *dispatcher_, registry_, options_.connection)
        ->Start();
  }
}

void Daemon::StartSignalHandling() {
  signals_ = std::make_unique<asio::signal_set>(io_context_, SIGTERM, SIGINT);
  signals_->async_wait([this](const boost::system::error_code& ec, int signal_number) {
    if (ec) return;
    common::LogInfo("received {}, shutting down", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
    RequestStop();
  });
}

int Daemon::Serve(engine::InferenceEngine& engine) {
  dispatcher_ = std::make_unique<Dispatcher>(engine, registry_);
  auto work = asio::make_work_guard(io_context_);
  asio::co_spawn(accept_strand_, AcceptLoop(), asio::detached);
  for (int i = 0; i < std::max(1, options_.io_threads); ++i) {
    io_threads_.emplace_back([this] { io_context_.run(); });
  }
  sd_notifyf(0, "READY=1\nSTATUS=listening on %s", listener_->path().c_str());
  common::LogInfo("listening on {}{}", listener_->path(),
                  listener_->socket_activated() ? " (socket-activated)" : "");
  WaitForStopRequest();
  sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
  Shutdown(engine);
  work.reset();
  io_context_.stop();
  for (std::thread& thread : io_threads_) thread.join();
  io_threads_.clear();
  common::LogInfo("stopped");
  return 0;
}

void Daemon::Shutdown(engine::InferenceEngine& engine) {
  // Stop accepting and remove the socket file (on the acceptor's strand).
  std::promise<void> closed;
  asio::post(accept_strand_, [this, &closed] {
    listener_->Close();
    if (signals_) signals_->cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  // In-flight work ends with a final CANCELLED, queued on the connections.
  engine.Shutdown();
  // Let each connection write what it has, then close; force-close the rest at the deadline.
  registry_.DrainAll();
  auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  while (registry_.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  registry_.StopAll();
  deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (registry_.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace niels::daemon::server
