#pragma once
// HttpFront: one listener of nielsd's HTTP/1.1 front, a server::Front beside the protobuf socket on
// the same RequestService. Either
//   - a Unix socket (nielsd --http-socket PATH; Open): bound with the protobuf socket's rules
//     (server::Listener: mode 0600 or 0660 with --socket-group, stale sockets replaced, a live
//     daemon's never taken over); each peer is identified by its uid (SO_PEERCRED) exactly as on
//     the protobuf socket; or
//   - a loopback TCP address (nielsd --http-listen ADDR; OpenTcp): each request names its caller by
//     an API key (HttpOptions::tcp, http_connection.h).
// Either enforces the connection limits of HttpOptions (over max_connections, or a uid's
// max_connections_per_uid: 429 with Retry-After, closed before anything is read; a principal's
// limit is checked at its requests). Each connection is an HttpConnection (http_connection.h).
//
// Threading: Open() and the Front methods from the Daemon's main thread; the accept loop runs on
// a strand of the io_context.

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>

#include "common/status.h"
#include "daemon/http/front_state.h"
#include "daemon/http/http_connection.h"
#include "daemon/http/http_options.h"
#include "daemon/server/front.h"
#include "daemon/server/listener.h"

namespace niels::daemon::http {

class HttpFront final : public server::Front {
 public:
  // Binds the Unix socket of options.listener (errors as server::Listener::Open). `io_context`
  // must outlive the front.
  static common::StatusOr<std::unique_ptr<HttpFront>> Open(boost::asio::io_context& io_context, HttpOptions options);
  // Binds options.tcp's endpoint (REQUIRES: options.tcp set, its keys not null). UNAVAILABLE when
  // it cannot be bound (in use, ...), naming the address.
  static common::StatusOr<std::unique_ptr<HttpFront>> OpenTcp(boost::asio::io_context& io_context,
                                                               HttpOptions options);
  ~HttpFront() override;

  // The socket's path, or the TCP address bound ("127.0.0.1:41234": with port 0, the kernel's).
  const std::string& address() const { return address_; }

  // server::Front.
  void Start(server::RequestService& service) override;
  void StopAccepting() override;
  void DrainAll() override;
  void StopAll() override;
  size_t connection_count() const override { return state_->size(); }

 private:
  HttpFront(boost::asio::io_context& io_context, HttpOptions options);
  boost::asio::awaitable<void> AcceptUnix();
  boost::asio::awaitable<void> AcceptTcp();
  // After an accept failed: whether to go on accepting (after a short pause).
  boost::asio::awaitable<bool> ContinueAfterAcceptError(const boost::system::error_code& ec);
  void AdmitUnix(server::Listener::Socket socket);
  void AdmitTcp(boost::asio::ip::tcp::socket socket);
  // Starts the connection, or refuses it when the front has max_connections.
  void Admit(HttpConnection::Socket socket, std::optional<common::OwnerId> owner, const std::string& peer);
  void Refuse(HttpConnection::Socket& socket, const std::string& message);

  boost::asio::io_context& io_context_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  std::shared_ptr<FrontState> state_;
  std::unique_ptr<server::Listener> listener_;                 // the Unix socket's, or
  std::optional<boost::asio::ip::tcp::acceptor> tcp_acceptor_;  // the TCP listener's
  std::string address_;
};

}  // namespace niels::daemon::http
