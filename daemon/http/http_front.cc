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
#include "daemon/http/loopback_access.h"

namespace niels::daemon::http {

namespace asio = boost::asio;

void FrontState::Add(const std::shared_ptr<HttpConnection>& connection, std::optional<common::OwnerId> owner) {
  std::lock_guard lock(mutex_);
  if (connections_.insert(connection).second && owner) ++per_owner_[*owner];
}

void FrontState::Remove(const HttpConnection* connection, std::optional<common::OwnerId> owner) {
  std::lock_guard lock(mutex_);
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() != connection) continue;
    connections_.erase(it);
    if (owner && --per_owner_[*owner] == 0) per_owner_.erase(*owner);
    return;
  }
}

bool FrontState::Rebind(std::optional<common::OwnerId> from, common::OwnerId to, size_t limit) {
  std::lock_guard lock(mutex_);
  if (from == to) return true;
  auto counted = per_owner_.find(to);
  if (counted != per_owner_.end() && counted->second >= limit) return false;
  ++per_owner_[to];
  if (from && --per_owner_[*from] == 0) per_owner_.erase(*from);
  return true;
}

size_t FrontState::size() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

size_t FrontState::CountFor(common::OwnerId owner) const {
  std::lock_guard lock(mutex_);
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() ? 0 : it->second;
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
  boost::system::error_code ignored;
  if (tcp_acceptor_) tcp_acceptor_->close(ignored);
}

common::StatusOr<std::unique_ptr<HttpFront>> HttpFront::Open(asio::io_context& io_context, HttpOptions options) {
  options.listener.allow_socket_activation = false;
  options.tcp.reset();
  std::unique_ptr<HttpFront> front(new HttpFront(io_context, options));
  common::StatusOr<std::unique_ptr<server::Listener>> listener =
      server::Listener::Open(front->accept_strand_, front->state_->options.listener);
  if (!listener.ok()) return listener.status();
  front->listener_ = std::move(listener).value();
  front->address_ = front->listener_->path();
  return front;
}

common::StatusOr<std::unique_ptr<HttpFront>> HttpFront::OpenTcp(asio::io_context& io_context, HttpOptions options) {
  const asio::ip::tcp::endpoint endpoint = options.tcp->endpoint;
  std::unique_ptr<HttpFront> front(new HttpFront(io_context, std::move(options)));
  asio::ip::tcp::acceptor acceptor(front->accept_strand_);
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return common::Status::Unavailable(fmt::format("cannot listen on {}: {}", EndpointText(endpoint), ec.message()));
  }
  const asio::ip::tcp::endpoint bound = acceptor.local_endpoint(ec);
  front->address_ = EndpointText(ec ? endpoint : bound);
  front->tcp_acceptor_.emplace(std::move(acceptor));
  return front;
}

void HttpFront::Start(server::RequestService& service) {
  state_->service.store(&service);
  if (tcp_acceptor_) {
    common::LogInfo("HTTP on {} (loopback TCP, {} API keys of {} principals)", address_,
                    state_->options.tcp->keys->key_count(), state_->options.tcp->keys->principals().size());
    asio::co_spawn(accept_strand_, AcceptTcp(), asio::detached);
  } else {
    common::LogInfo("HTTP on {}", address_);
    asio::co_spawn(accept_strand_, AcceptUnix(), asio::detached);
  }
}

asio::awaitable<bool> HttpFront::ContinueAfterAcceptError(const boost::system::error_code& ec) {
  const bool open = listener_ ? listener_->acceptor().is_open() : tcp_acceptor_->is_open();
  if (ec == asio::error::operation_aborted || !open) co_return false;
  static common::LogRateLimit limit("http accept errors");
  common::LogWarnLimited(limit, "accept on {}: {}", address_, ec.message());
  // Out of descriptors or another transient failure: back off instead of spinning.
  asio::steady_timer pause(accept_strand_, std::chrono::milliseconds(10));
  boost::system::error_code ignored;
  co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  co_return true;
}

asio::awaitable<void> HttpFront::AcceptUnix() {
  boost::system::error_code ec;
  for (;;) {
    server::Listener::Socket socket(asio::make_strand(io_context_));
    co_await listener_->acceptor().async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!co_await ContinueAfterAcceptError(ec)) co_return;
      continue;
    }
    AdmitUnix(std::move(socket));
  }
}

asio::awaitable<void> HttpFront::AcceptTcp() {
  boost::system::error_code ec;
  for (;;) {
    asio::ip::tcp::socket socket(asio::make_strand(io_context_));
    co_await tcp_acceptor_->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!co_await ContinueAfterAcceptError(ec)) co_return;
      continue;
    }
    AdmitTcp(std::move(socket));
  }
}

void HttpFront::AdmitUnix(server::Listener::Socket socket) {
  common::StatusOr<uint32_t> uid = server::Listener::PeerUid(socket);
  if (!uid.ok()) {
    static common::LogRateLimit limit("rejected http connections");
    common::LogWarnLimited(limit, "rejecting an http connection: {}", uid.status().ToString());
    return;
  }
  HttpConnection::Socket generic(std::move(socket));
  const common::OwnerId owner = common::UidOwner(*uid);
  if (state_->CountFor(owner) >= state_->options.max_connections_per_uid) {
    static common::LogRateLimit limit("refused http connections (--max-connections-per-uid)");
    common::LogWarnLimited(limit, "refusing an http connection of uid {}: it has {} open (--max-connections-per-uid)",
                           *uid, state_->CountFor(owner));
    Refuse(generic, fmt::format("uid {} has {} HTTP connections open to nielsd, the limit per user "
                                "(--max-connections-per-uid); close some first",
                                *uid, state_->CountFor(owner)));
    return;
  }
  Admit(std::move(generic), owner, fmt::format("uid {}", *uid));
}

void HttpFront::AdmitTcp(asio::ip::tcp::socket socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);  // stream events go out as they come
  // Who the peer is, each request's key says (http_connection.h).
  Admit(HttpConnection::Socket(std::move(socket)), std::nullopt, "a TCP peer");
}

void HttpFront::Admit(HttpConnection::Socket socket, std::optional<common::OwnerId> owner, const std::string& peer) {
  const HttpOptions& options = state_->options;
  if (state_->size() >= options.max_connections) {
    static common::LogRateLimit limit("refused http connections (--max-connections)");
    common::LogWarnLimited(limit, "refusing an http connection of {}: {} open (--max-connections)", peer,
                           state_->size());
    Refuse(socket, fmt::format("nielsd has {} HTTP connections open, its limit (--max-connections); try again later",
                               state_->size()));
    return;
  }
  auto connection = std::make_shared<HttpConnection>(std::move(socket), owner, state_);
  connection->Start();
  if (state_->shutting_down.load()) connection->Drain();
}

void HttpFront::Refuse(HttpConnection::Socket& socket, const std::string& message) {
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
  socket.shutdown(HttpConnection::Socket::shutdown_both, ignored);
  socket.close(ignored);
}

void HttpFront::StopAccepting() {
  state_->shutting_down.store(true);
  std::promise<void> closed;
  asio::post(accept_strand_, [this, &closed] {
    if (listener_) listener_->Close();
    boost::system::error_code ignored;
    if (tcp_acceptor_) tcp_acceptor_->close(ignored);
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
