#include "daemon/http/http_front.h"

#include <sys/socket.h>

#include <future>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include "common/log.h"
#include "daemon/http/api_error.h"
#include "daemon/http/http_connection.h"

namespace niels::daemon::http {

namespace asio = boost::asio;

void FrontState::Add(const std::shared_ptr<HttpConnection>& connection, uint32_t uid) {
  std::lock_guard lock(mutex_);
  if (connections_.insert(connection).second) ++per_uid_[uid];
}

void FrontState::Remove(const HttpConnection* connection, uint32_t uid) {
  std::lock_guard lock(mutex_);
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() != connection) continue;
    connections_.erase(it);
    if (--per_uid_[uid] == 0) per_uid_.erase(uid);
    return;
  }
}

size_t FrontState::size() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

size_t FrontState::CountFor(uint32_t uid) const {
  std::lock_guard lock(mutex_);
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

std::vector<std::shared_ptr<HttpConnection>> FrontState::Snapshot() const {
  std::lock_guard lock(mutex_);
  return {connections_.begin(), connections_.end()};
}

std::optional<ModelView> FrontState::model() const {
  std::lock_guard lock(mutex_);
  return model_;
}

void FrontState::set_model(ModelView model) {
  std::lock_guard lock(mutex_);
  model_ = std::move(model);
}

HttpFront::HttpFront(asio::io_context& io_context, HttpOptions options)
    : io_context_(io_context),
      accept_strand_(asio::make_strand(io_context)),
      state_(std::make_shared<FrontState>(std::move(options))) {}

HttpFront::~HttpFront() {
  if (listener_) listener_->Close();
}

common::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Open(asio::io_context& io_context, HttpOptions options) {
  options.listener.allow_socket_activation = false;
  std::unique_ptr<HttpFront> front(new HttpFront(io_context, options));
  common::StatusOr<std::unique_ptr<server::Listener>> listener =
      server::Listener::Open(front->accept_strand_, front->state_->options.listener);
  if (!listener.ok()) return listener.status();
  front->listener_ = std::move(listener).value();
  front->path_ = front->listener_->path();
  return front;
}

void HttpFront::Start(server::RequestService& service) {
  state_->service.store(&service);
  common::LogInfo("HTTP on {}", path_);
  asio::co_spawn(accept_strand_, AcceptLoop(), asio::detached);
}

asio::awaitable<void> HttpFront::AcceptLoop() {
  boost::system::error_code ec;
  for (;;) {
    server::Listener::Socket socket(asio::make_strand(io_context_));
    co_await listener_->acceptor().async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !listener_->acceptor().is_open()) co_return;
      static common::LogRateLimit limit("http accept errors");
      common::LogWarnLimited(limit, "accept on {}: {}", path_, ec.message());
      // Out of descriptors or another transient failure: back off instead of spinning.
      asio::steady_timer pause(accept_strand_, std::chrono::milliseconds(10));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    Admit(std::move(socket));
  }
}

void HttpFront::Admit(server::Listener::Socket socket) {
  common::StatusOr<uint32_t> uid = server::Listener::PeerUid(socket);
  if (!uid.ok()) {
    static common::LogRateLimit limit("rejected http connections");
    common::LogWarnLimited(limit, "rejecting an http connection: {}", uid.status().ToString());
    return;
  }
  const HttpOptions& options = state_->options;
  if (state_->size() >= options.max_connections) {
    static common::LogRateLimit limit("refused http connections (--max-connections)");
    common::LogWarnLimited(limit, "refusing an http connection of uid {}: {} open (--max-connections)", *uid,
                           state_->size());
    Refuse(socket, fmt::format("nielsd has {} HTTP connections open, its limit (--max-connections); try again later",
                               state_->size()));
    return;
  }
  if (state_->CountFor(*uid) >= options.max_connections_per_uid) {
    static common::LogRateLimit limit("refused http connections (--max-connections-per-uid)");
    common::LogWarnLimited(limit, "refusing an http connection of uid {}: it has {} open (--max-connections-per-uid)",
                           *uid, state_->CountFor(*uid));
    Refuse(socket, fmt::format("uid {} has {} HTTP connections open to nielsd, the limit per user "
                               "(--max-connections-per-uid); close some first",
                               *uid, state_->CountFor(*uid)));
    return;
  }
  auto connection = std::make_shared<HttpConnection>(std::move(socket), *uid, state_);
  connection->Start();
  if (state_->shutting_down.load()) connection->Drain();
}

void HttpFront::Refuse(server::Listener::Socket& socket, const std::string& message) {
  const std::string body = ErrorBody(MakeError(429, message, "", "too_many_connections"));
  const std::string response = fmt::format(
      "HTTP/1.1 429 Too Many Requests\r\nServer: nielsd\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
      body.size(), body);
  // A fresh socket's send buffer is empty, so this small write does not block.
  (void)!::send(socket.native_handle(), response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  // Drop what the peer already sent (bounded), so the close is not a reset that loses the answer.
  char discard[4096];
  for (int i = 0; i < 16 && ::recv(socket.native_handle(), discard, sizeof(discard), MSG_DONTWAIT) > 0; ++i) {
  }
  boost::system::error_code ignored;
  socket.shutdown(server::Listener::Socket::shutdown_both, ignored);
  socket.close(ignored);
}

void HttpFront::StopAccepting() {
  state_->shutting_down.store(true);
  std::promise<void> closed;
  asio::post(accept_strand_, [this, &closed] {
    if (listener_) listener_->Close();
    closed.set_value();
  });
  closed.get_future().wait();
}

void HttpFront::DrainAll() {
  for (const std::shared_ptr<HttpConnection>& connection : state_->Snapshot()) connection->Drain();
}

void HttpFront::StopAll() {
  for (const std::shared_ptr<HttpConnection>& connection : state_->Snapshot()) connection->Stop();
}

}  // namespace niels::daemon::http
