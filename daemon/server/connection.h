#pragma once
// Connection: one accepted Unix-socket peer. It only moves frames: reader() decodes Request frames
// and hands them to its RequestHandler (the Dispatcher in nielsd); writer() drains an outgoing queue
// of encoded Response frames.
// (In nielsd "session" means a chat session with its KV cache; a socket peer is a connection.)
//
// Every request of this connection that is in flight has a cancel flag here (request_id -> flag).
// Cancel(request_id) sets one flag; closing the connection sets all of them.
//
// Output is bounded. Every outgoing frame (stream events, final responses, errors) counts toward the
// backlog of bytes and frames waiting to be written. Over ConnectionOptions::max_queued_bytes (or
// max_queued_frames):
//   - a response sink refuses non-final responses, which makes the engine cancel that request (so a
//     client that stops reading its stream never stalls others);
//   - the reader stops reading requests until the backlog is written (final responses are still
//     queued: every request gets one, and a paused reader admits no new ones);
//   - if the backlog stays over the bound for backlog_timeout, the connection is closed.
// A response larger than max_response_bytes is replaced by RESOURCE_EXHAUSTED.
//
// A started frame must be complete within frame_timeout, or the connection is closed (a client
// cannot pin a partial frame's buffer forever). An exception escaping the reader or the writer closes
// the connection.
//
// Threading: the socket's executor is a strand. reader(), writer(), the request map and the queue
// live on it. Stop(), Drain() and the sinks' Send() may be called from any thread; they post to the
// strand. The RequestChannel methods are for the request handler, which runs on the strand.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/frame.h"
#include "daemon/server/request_channel.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

class ConnectionRegistry;

struct ConnectionOptions {
  /// Largest accepted request frame; bigger ones close the connection. Default 4 MiB.
  size_t max_frame_bytes = common::kDefaultMaxFrameBytes;
  /// Outgoing bytes queued (not yet written) beyond which stream events are refused. Default 8 MiB.
  size_t max_queued_bytes = 8u << 20;
  /// Outgoing frames queued beyond which stream events are refused. Default 65536.
  size_t max_queued_frames = 65536;
  /// Largest response frame; a larger response becomes RESOURCE_EXHAUSTED. Default 64 MiB.
  size_t max_response_bytes = common::kMaxResponseBytes;
  /// How long the backlog may stay over its bound before the connection is closed. Default 30 s.
  std::chrono::milliseconds backlog_timeout = std::chrono::seconds(30);
  /// How long a started request frame may take to arrive whole. Default 30 s.
  std::chrono::milliseconds frame_timeout = std::chrono::seconds(30);
};

class Connection final : public RequestChannel, public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;

  /// `socket`'s executor must be a strand. `registry` must outlive the connection; `handler` gets
  /// every decoded request, on the strand.
  Connection(Socket socket, uint32_t peer_uid, RequestHandler handler, ConnectionRegistry& registry,
             ConnectionOptions options);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /// Registers with the registry and spawns reader() and writer(). Call once.
  void Start();
  /// Closes the socket now and sets every in-flight request's cancel flag. Idempotent, any thread.
  void Stop();
  /// For shutdown: reads and handles every request the peer sent before this call (later bytes are
  /// refused: the read side is shut down), writes every answer, then Stop()s. Any thread.
  void Drain();

  /// The peer's uid (SO_PEERCRED at accept time). Any thread.
  uint32_t peer_uid() const override { return peer_uid_; }

  // RequestChannel (request_channel.h). REQUIRES: strand (SendNow: any thread). A tracked
  // request's sink echoes its id, enforces the output bound, and stops tracking the request when
  // the final response is queued.
  bool InFlight(uint64_t request_id) const override;
  std::optional<Tracked> Track(uint64_t request_id) override;
  bool CancelRequest(uint64_t request_id, bool keep_output = false) override;
  void SendNow(const niels::v1::Response& response) override;

  /// Any thread. Queues one encoded frame. Non-final frames are refused (false) over the bound;
  /// everything is refused once the connection is stopped. `finishes` names a tracked request
  /// whose final response this is.
  bool Enqueue(std::string frame, bool bounded, std::optional<uint64_t> finishes);

  /// Number of requests in flight (for tests). REQUIRES: strand.
  size_t in_flight() const { return requests_.size(); }

 private:
  // A request in flight: its cancel and stop flags, and whether its final response has been queued.
  struct InFlightRequest {
    std::shared_ptr<std::atomic<bool>> cancel;
    std::shared_ptr<std::atomic<bool>> stop;
    std::shared_ptr<std::atomic<bool>> answered;
  };

  boost::asio::awaitable<void> Reader();
  boost::asio::awaitable<void> Writer();
  // Closes the connection when a started frame or an over-bound backlog has lasted too long.
  boost::asio::awaitable<void> Watchdog();
  // Whether the queued output is over the bound (the reader pauses while it is).
  bool Backlogged() const;
  void HandleFrame(const std::string& payload);
  void DoStop();
  void PushOutgoing(std::string frame, std::optional<uint64_t> finishes);

  Socket socket_;
  const uint32_t peer_uid_;
  const RequestHandler handler_;
  ConnectionRegistry& registry_;
  const ConnectionOptions options_;
  common::FrameDecoder decoder_;
  boost::asio::steady_timer wakeup_;  // the writer sleeps on it; PushOutgoing/Stop cancel it
  boost::asio::steady_timer resume_;  // a backlogged reader sleeps on it; the writer/Stop cancel it
  boost::asio::steady_timer watchdog_timer_;

  std::atomic<bool> closed_{false};          // set once stopping: sinks refuse everything
  std::atomic<size_t> queued_bytes_{0};      // accepted but not yet written
  std::atomic<size_t> queued_frames_{0};

  // Strand-only state.
  std::unordered_map<uint64_t, InFlightRequest> requests_;
  std::deque<std::string> outgoing_;
  bool stopped_ = false;
  bool draining_ = false;
  bool reader_done_ = false;  // draining: the reader has read to the end of file
  bool reader_paused_ = false;
  std::optional<std::chrono::steady_clock::time_point> frame_started_;      // a partial frame is buffered
  std::optional<std::chrono::steady_clock::time_point> backlogged_since_;  // output over the bound
};

}  // namespace niels::daemon::server
