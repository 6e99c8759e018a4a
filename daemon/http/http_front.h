#pragma once
// HttpFront: nielsd's HTTP/1.1 socket (nielsd --http-socket PATH), a server::Front beside the
// protobuf socket on the same RequestService. It binds its Unix socket with the protobuf socket's
// rules (server::Listener: mode 0600 or 0660 with --socket-group, stale sockets replaced, a live
// daemon's never taken over), identifies each peer by its uid (SO_PEERCRED) exactly as the protobuf
// socket does, and enforces the connection limits of HttpOptions (over one: 429 with Retry-After,
// closed before anything is read). Each connection is an HttpConnection (http_connection.h).
//
// Threading: Open() and the Front methods from the Daemon's main thread; the accept loop runs on
// a strand of the io_context.

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include "common/status.h"
#include "daemon/http/front_state.h"
#include "daemon/http/http_options.h"
#include "daemon/server/front.h"
#include "daemon/server/listener.h"

namespace niels::daemon::http {

class HttpFront final : public server::Front {
 public:
  // Binds the socket (errors as server::Listener::Open). `io_context` must outlive the front.
  static common::StatusOr<std::unique_ptr<HttpFront>> Open(boost::asio::io_context& io_context, HttpOptions options);
  ~HttpFront() override;

  const std::string& path() const { return path_; }

  // server::Front.
  void Start(server::RequestService& service) override;
  void StopAccepting() override;
  void DrainAll() override;
  void StopAll() override;
  size_t connection_count() const override { return state_->size(); }

 private:
  HttpFront(boost::asio::io_context& io_context, HttpOptions options);
  boost::asio::awaitable<void> AcceptLoop();
  void Admit(server::Listener::Socket socket);
  void Refuse(server::Listener::Socket& socket, const std::string& message);

  boost::asio::io_context& io_context_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  std::shared_ptr<FrontState> state_;
  std::unique_ptr<server::Listener> listener_;
  std::string path_;
};

}  // namespace niels::daemon::http
