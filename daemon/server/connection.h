#pragma once
// Connection: one accepted Unix-socket peer. It only moves frames: reader() decodes Request frames
// and hands them to the Dispatcher; writer() drains an outgoing queue of encoded Response frames.
// (In nielsd "session" means a chat session with its KV cache; a socket peer is a connection.)
//
// Every request of this connection that is in flight has a cancel flag here (request_id -> flag).
// Cancel(request_id) sets one flag; closing the connection sets all of them.
//
// Output is bounded: a response sink refuses non-final responses once more than
// ConnectionOptions::max_queued_bytes (or max_queued_frames) wait to be written, which makes the
// engine cancel that request. So a client that stops reading its stream never stalls others.
//
// Threading: the socket's executor is a strand. reader(), writer(), the request map and the queue
// live on it. Stop(), Drain() and the sinks' Send() may be called from any thread; they post to the
// strand. The methods marked REQUIRES: strand are for the Dispatcher, which runs on the strand.

#include <atomic>
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
#include "daemon/engine/inference_engine.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

class ConnectionRegistry;
class Dispatcher;

struct ConnectionOptions {
  /// Largest accepted request frame; bigger ones close the connection. Default 4 MiB.
  size_t max_frame_bytes = common::kDefaultMaxFrameBytes;
  /// Outgoing bytes queued (not yet written) beyond which stream events are refused. Default 8 MiB.
  size_t max_queued_bytes = 8u << 20;
  /// Outgoing frames queued beyond which stream events are refused. Default 65536.
  size_t max_queued_frames = 65536;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;

  /// `socket`'s executor must be a strand. `dispatcher` and `registry` must outlive the connection.
  Connection(Socket socket, uint32_t peer_uid, Dispatcher& dispatcher, ConnectionRegistry& registry,
             ConnectionOptions options);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /// Registers with the registry and spawns reader() and writer(). Call once.
  void Start();
  /// Closes the socket now and sets every in-flight request's cancel flag. Idempotent, any thread.
  void Stop();
  /// Stops reading, writes what is queued, then Stop()s. Any thread.
  void Drain();

  /// The peer's uid (SO_PEERCRED at accept time).
  uint32_t peer_uid() const { return peer_uid_; }

  /// REQUIRES: strand. Starts tracking `request_id`; returns its fresh cancel flag, or null when a
  /// request with that id is already in flight on this connection.
  std::shared_ptr<std::atomic<bool>> TrackRequest(uint64_t request_id);
  /// REQUIRES: strand. Sets the cancel flag of an in-flight request; false when there is none.
  bool CancelRequest(uint64_t request_id);
  /// REQUIRES: strand. The sink for a tracked request: it echoes `request_id`, enforces the output
  /// bound, and stops tracking the request when the final response is queued.
  std::shared_ptr<engine::ResponseSink> MakeSink(uint64_t request_id,
                                                 std::shared_ptr<std::atomic<bool>> cancel);
  /// Any thread. Queues a response that answers an untracked request (always accepted while open).
  void SendNow(const niels::v1::Response& response);

  /// Any thread. Queues one encoded frame. Non-final frames are refused (false) over the bound;
  /// everything is refused once the connection is stopped. `finishes` names a tracked request
  /// whose final response this is.
  bool Enqueue(std::string frame, bool bounded, std::optional<uint64_t> finishes);

  /// Number of requests in flight (for tests). REQUIRES: strand.
  size_t in_flight() const { return requests_.size(); }

 private:
  boost::asio::awaitable<void> Reader();
  boost::asio::awaitable<void> Writer();
  void HandleFrame(const std::string& payload);
  void DoStop();
  void PushOutgoing(std::string frame, std::optional<uint64_t> finishes);

  Socket socket_;
  const uint32_t peer_uid_;
  Dispatcher& dispatcher_;
  ConnectionRegistry& registry_;
  const ConnectionOptions options_;
  common::FrameDecoder decoder_;
  boost::asio::steady_timer wakeup_;  // the writer sleeps on it; PushOutgoing/Stop cancel it

  std::atomic<bool> closed_{false};          // set once stopping: sinks refuse everything
  std::atomic<size_t> queued_bytes_{0};      // accepted but not yet written
  std::atomic<size_t> queued_frames_{0};

  // Strand-only state.
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> requests_;
  std::deque<std::string> outgoing_;
  bool stopped_ = false;
  bool draining_ = false;
};

}  // namespace niels::daemon::server
