#pragma once
// HttpConnection: one accepted peer of the HTTP socket. It reads HTTP/1.1 requests one at a time
// (Boost.Beast's parser, with the head and body limits and the header, body and idle timeouts of
// HttpOptions), routes each (routes.h) and is the Exchange its API handler runs on: engine calls go
// to the RequestService as Jobs of the peer's owner, exactly as the protobuf socket's do: on a Unix
// socket the peer's uid; on the loopback TCP listener the principal of the request's API key.
//
// On TCP (HttpOptions::tcp) every request is first checked: a Host that is not a loopback name or
// an Origin header (unless allowed) is 403, a missing or unknown key 401 (`Authorization: Bearer
// KEY`; for /v1/messages `x-api-key: KEY` too), each in the error shape of the request's API; the
// connection keeps serving. The connection then counts for the key's principal (its
// max_connections_per_uid; past it 429 and the connection is closed).
//
// Bounds (HttpOptions): a head over max_header_bytes is 431, a body over max_body_bytes 413, a
// malformed request 400 -- each answered, then the connection is closed after the client's
// remaining bytes are drained for up to a second, so the client reads the answer rather than a
// reset. A head slower than header_timeout, or a kept-alive connection idle past idle_timeout, is
// closed; a body slower than body_timeout is 408 and closed. While an engine call runs, its events
// wait in a queue of at most max_queued_bytes (past it the call is cancelled, as on the protobuf
// socket); every write must complete within write_timeout or the connection is closed and the call
// cancelled. A peer that disconnects cancels its call (checked every 200 ms and on every write).
//
// Threading: the socket's executor is a strand; the coroutine, the Exchange methods and all state
// live on it. Stop() and Drain() may be called from any thread (they post to the strand); the
// engine's sinks hand responses to the strand.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/owner.h"
#include "daemon/http/exchange.h"
#include "daemon/http/front_state.h"

namespace niels::daemon::http {

namespace call_detail {
struct CallState;
struct CallTiming;
}  // namespace call_detail

class HttpConnection final : public Exchange, public std::enable_shared_from_this<HttpConnection> {
 public:
  // A Unix or a TCP socket (either converts to the generic one).
  using Socket = boost::asio::generic::stream_protocol::socket;
  using Stream = boost::beast::basic_stream<boost::asio::generic::stream_protocol>;

  // `socket`'s executor must be a strand. `owner`: the peer uid's owner on a Unix socket; nullopt
  // on TCP, where each request's key names it.
  HttpConnection(Socket socket, std::optional<common::OwnerId> owner, std::shared_ptr<FrontState> front);
  ~HttpConnection() override;
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Registers with the front and starts serving. Call once.
  void Start();
  // Closes the socket now; the running call (if any) is cancelled. Idempotent, any thread.
  void Stop();
  // Closes the connection once the response being written is done (at once when idle). Any thread.
  void Drain();

  // Exchange (exchange.h).
  boost::asio::awaitable<niels::v1::Response> Call(niels::v1::Request request, EventHandler on_event) override;
  boost::asio::awaitable<std::vector<niels::v1::Response>> CallAll(std::vector<niels::v1::Request> requests,
                                                                   IndexedEventHandler on_event) override;
  boost::asio::awaitable<niels::v1::Response> CallToEnd(niels::v1::Request request) override;
  void SetEndpoint(const char* endpoint) override { endpoint_ = endpoint; }
  boost::asio::awaitable<std::optional<ApiError>> Model(ModelView* model) override;
  boost::asio::awaitable<void> Respond(unsigned status, std::string body, std::string content_type) override;
  boost::asio::awaitable<void> RespondError(const ApiError& error) override;
  boost::asio::awaitable<bool> BeginEvents() override;
  boost::asio::awaitable<bool> SendEvent(std::string_view data) override;
  boost::asio::awaitable<bool> SendNamedEvent(std::string_view name, std::string_view data) override;
  boost::asio::awaitable<void> EndEvents() override;

 private:
  enum class Answer { kNone, kResponded, kStreaming, kStreamEnded };

  boost::asio::awaitable<void> Run();
  // The TCP listener's checks of a request (the class comment); false when it was answered with
  // a refusal instead.
  boost::asio::awaitable<bool> AdmitOnTcp(const boost::beast::http::request<boost::beast::http::string_body>& request);
  // "uid 1000", "API-key principal NAME", or "an unauthenticated TCP peer", for the log.
  std::string PeerText() const;
  boost::asio::awaitable<std::vector<niels::v1::Response>> DoCalls(std::vector<niels::v1::Request> requests,
                                                                   IndexedEventHandler on_event, bool cancellable);
  // Submits requests[slot] of a call (its id set here) and notes when, for the histograms.
  void SubmitOne(server::RequestService& service, niels::v1::Request& request,
                 const std::shared_ptr<call_detail::CallState>& state, const std::shared_ptr<std::atomic<bool>>& cancel,
                 size_t slot, call_detail::CallTiming* timing);
  boost::asio::awaitable<void> Write(unsigned status, std::string body, uint32_t retry_after_s,
                                     const std::string& content_type);
  // Answers a request that could not be read and closes the connection after draining what the
  // client still sends (bounded: one second).
  // `shape`: the error body's (that of the API the request was for, when its head was read).
  boost::asio::awaitable<void> RefuseAndClose(unsigned status, const std::string& message,
                                              ErrorShape shape = ErrorShape::kOpenAi);
  // Writes one event's bytes (a chunk under chunked encoding).
  boost::asio::awaitable<bool> WriteEvent(const std::string& event);
  // Whether the peer has closed its side (or the socket is closed).
  bool PeerGone();
  void DoStop();

  Stream stream_;
  std::optional<common::OwnerId> owner_;  // strand-only after Start
  std::string principal_name_;            // on TCP, of owner_
  const std::shared_ptr<FrontState> front_;
  boost::beast::flat_buffer buffer_;

  // Strand-only state.
  bool stopped_ = false;
  bool draining_ = false;
  bool idle_ = false;         // waiting for the first byte of a request
  bool broken_ = false;       // a write failed: nothing more is written
  bool keep_alive_ = true;    // of the current request
  unsigned version_ = 11;     // of the current request
  bool chunked_ = true;       // the current stream's events are chunks (HTTP/1.1)
  Answer answer_ = Answer::kNone;
  unsigned answer_status_ = 0;  // of the current request's answer (counted for /metrics)
  uint64_t next_request_id_ = 0;
  std::shared_ptr<std::atomic<bool>> current_cancel_;  // the running cancellable call's
  const char* endpoint_ = nullptr;  // the current request's route label (routes.h), for the histograms
};

}  // namespace niels::daemon::http
