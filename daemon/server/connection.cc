#include "daemon/server/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include "common/log.h"
#include "common/wire_status.h"
#include "daemon/server/connection_registry.h"

namespace niels::daemon::server {
namespace {

namespace asio = boost::asio;
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kWriteBatchBytes = 256 * 1024;

// The sink the engine sees for one request: echoes the id, enforces the output bound, and turns
// a refused event into a cancelled request.
class ConnectionSink : public ResponseSink {
 public:
  ConnectionSink(std::weak_ptr<Connection> connection, uint64_t request_id,
                 std::shared_ptr<std::atomic<bool>> cancel, std::shared_ptr<std::atomic<bool>> answered,
                 size_t max_response_bytes)
      : connection_(std::move(connection)),
        request_id_(request_id),
        cancel_(std::move(cancel)),
        answered_(std::move(answered)),
        max_response_bytes_(max_response_bytes) {}

  bool Send(niels::v1::Response response, bool final) override {
    if (refused_.load() && !final) return false;
    response.set_request_id(request_id_);
    const size_t bytes = response.ByteSizeLong();
    if (bytes > max_response_bytes_) {
      if (!final) return Refuse();
      static common::LogRateLimit limit("oversized responses");
      common::LogWarnLimited(limit, "request {}: a {}-byte response replaced by RESOURCE_EXHAUSTED", request_id_,
                             bytes);
      response.Clear();
      response.set_request_id(request_id_);
      *response.mutable_error() = common::ToProto(common::Status::ResourceExhausted(fmt::format(
          "the response would be {} bytes, more than the {} bytes nielsd sends in one frame; ask for "
          "less (fewer tokens, top logprobs or attention traces) or stream it",
          bytes, max_response_bytes_)));
    }
    if (final) answered_->store(true);
    std::shared_ptr<Connection> connection = connection_.lock();
    bool accepted = connection != nullptr &&
                    connection->Enqueue(common::EncodeFrame(response), /*bounded=*/!final,
                                        final ? std::optional<uint64_t>(request_id_) : std::nullopt);
    if (!accepted && !final) return Refuse();
    return accepted;
  }

 private:
  bool Refuse() {
    refused_.store(true);
    cancel_->store(true);
    return false;
  }

  std::weak_ptr<Connection> connection_;
  const uint64_t request_id_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<std::atomic<bool>> answered_;
  const size_t max_response_bytes_;
  std::atomic<bool> refused_{false};
};

// Logs an exception that ended a connection coroutine and stops the connection.
auto StopOnException(std::shared_ptr<Connection> connection, const char* what) {
  return [connection = std::move(connection), what](std::exception_ptr error) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      common::LogError("connection uid={}: {} failed: {}; closing it", connection->peer_uid(), what, e.what());
    } catch (...) {
      common::LogError("connection uid={}: {} failed; closing it", connection->peer_uid(), what);
    }
    connection->Stop();
  };
}

}  // namespace

Connection::Connection(Socket socket, uint32_t peer_uid, RequestHandler handler,
                       ConnectionRegistry& registry, ConnectionOptions options)
    : socket_(std::move(socket)),
      peer_uid_(peer_uid),
      handler_(std::move(handler)),
      registry_(registry),
      options_(options),
      decoder_(options.max_frame_bytes),
      wakeup_(socket_.get_executor()),
      resume_(socket_.get_executor()),
      watchdog_timer_(socket_.get_executor()) {}

Connection::~Connection() = default;

void Connection::Start() {
  registry_.Add(shared_from_this());
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), [self] { return self->Reader(); }, StopOnException(self, "reader"));
  asio::co_spawn(socket_.get_executor(), [self] { return self->Writer(); }, StopOnException(self, "writer"));
  asio::co_spawn(socket_.get_executor(), [self] { return self->Watchdog(); }, StopOnException(self, "watchdog"));
}

void Connection::Stop() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->DoStop(); });
}

void Connection::Drain() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    if (self->stopped_ || self->draining_) return;
    self->draining_ = true;
    // Shutting down the read side wakes the reader, which then reads, in order, every byte the peer
    // sent before this point, handles those requests, and ends at the end of file. (Reading here
    // instead could reorder bytes with a read the reactor has already completed.) The peer's
    // later writes fail with EPIPE.
    if (::shutdown(self->socket_.native_handle(), SHUT_RD) != 0) self->reader_done_ = true;
    self->wakeup_.cancel();
  });
}

void Connection::DoStop() {
  if (stopped_) return;
  stopped_ = true;
  closed_.store(true);
  for (auto& [id, tracked] : requests_) tracked.cancel->store(true);
  requests_.clear();
  outgoing_.clear();
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  wakeup_.cancel();
  resume_.cancel();
  watchdog_timer_.cancel();
  registry_.Remove(this);
}

std::optional<RequestChannel::Tracked> Connection::Track(uint64_t request_id) {
  auto [it, inserted] = requests_.try_emplace(request_id);
  if (!inserted) return std::nullopt;
  it->second.cancel = std::make_shared<std::atomic<bool>>(false);
  it->second.stop = std::make_shared<std::atomic<bool>>(false);
  it->second.answered = std::make_shared<std::atomic<bool>>(false);
  auto sink = std::make_shared<ConnectionSink>(weak_from_this(), request_id, it->second.cancel, it->second.answered,
                                               options_.max_response_bytes);
  return Tracked{it->second.cancel, it->second.stop, std::move(sink)};
}

bool Connection::InFlight(uint64_t request_id) const { return requests_.count(request_id) != 0; }

bool Connection::CancelRequest(uint64_t request_id, bool keep_output) {
  auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second.answered->load()) return false;
  (keep_output ? it->second.stop : it->second.cancel)->store(true);
  return true;
}

void Connection::SendNow(const niels::v1::Response& response) {
  Enqueue(common::EncodeFrame(response), /*bounded=*/false, std::nullopt);
}

bool Connection::Backlogged() const {
  return queued_bytes_.load() > options_.max_queued_bytes || queued_frames_.load() > options_.max_queued_frames;
}

bool Connection::Enqueue(std::string frame, bool bounded, std::optional<uint64_t> finishes) {
  if (closed_.load()) return false;
  const size_t bytes = frame.size();
  if (bounded && (queued_bytes_.load() + bytes > options_.max_queued_bytes ||
                  queued_frames_.load() + 1 > options_.max_queued_frames)) {
    return false;
  }
  queued_bytes_ += bytes;
  queued_frames_ += 1;
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), frame = std::move(frame), finishes]() mutable {
               self->PushOutgoing(std::move(frame), finishes);
             });
  return true;
}

void Connection::PushOutgoing(std::string frame, std::optional<uint64_t> finishes) {
  if (finishes) requests_.erase(*finishes);
  if (stopped_) return;
  outgoing_.push_back(std::move(frame));
  wakeup_.cancel();
}

void Connection::HandleFrame(const std::string& payload) {
  niels::v1::Request request;
  common::Status parsed = common::ParseFrame(payload, &request);
  if (!parsed.ok()) {
    // The framing is intact, only the message is bad: answer on request id 0, keep the connection.
    static common::LogRateLimit limit("unparsable requests");
    common::LogWarnLimited(limit, "connection uid={}: {}", peer_uid_, parsed.message());
    niels::v1::Response response;
    response.set_request_id(0);
    *response.mutable_error() = common::ToProto(
        common::Status::InvalidArgument("frame is not a valid niels.v1.Request: " + parsed.message()));
    SendNow(response);
    return;
  }
  handler_(*this, std::move(request));
}

asio::awaitable<void> Connection::Reader() {
  auto buffer = std::make_unique<std::array<char, kReadChunkBytes>>();
  std::string payload;
  boost::system::error_code ec;
  while (!stopped_) {
    // Handle every complete frame already buffered, pausing while the replies are not being read.
    for (;;) {
      while (Backlogged() && !stopped_) {
        if (!backlogged_since_) backlogged_since_ = std::chrono::steady_clock::now();
        reader_paused_ = true;
        resume_.expires_at(std::chrono::steady_clock::time_point::max());
        co_await resume_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        reader_paused_ = false;
      }
      backlogged_since_.reset();
      if (stopped_) co_return;
      common::FrameDecoder::Result result = decoder_.Next(&payload);
      if (result == common::FrameDecoder::Result::kNeedMore) break;
      if (result == common::FrameDecoder::Result::kError) {
        static common::LogRateLimit limit("connections closed for a framing error");
        common::LogWarnLimited(limit, "connection uid={}: closing: {}", peer_uid_, decoder_.error().ToString());
        DoStop();
        co_return;
      }
      HandleFrame(payload);
      if (stopped_) co_return;
    }
    if (decoder_.buffered_bytes() == 0) {
      frame_started_.reset();
    } else if (!frame_started_) {
      frame_started_ = std::chrono::steady_clock::now();
    }
    size_t n = co_await socket_.async_read_some(asio::buffer(*buffer),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    decoder_.Feed(std::string_view(buffer->data(), n));
  }
  if (ec == asio::error::eof) {
    common::Status finished = decoder_.Finish();
    static common::LogRateLimit limit("connections closed in the middle of a frame");
    if (!finished.ok() && !draining_) {
      common::LogWarnLimited(limit, "connection uid={}: {}", peer_uid_, finished.ToString());
    }
  } else if (ec && ec != asio::error::operation_aborted) {
    common::LogDebug("connection uid={}: read: {}", peer_uid_, ec.message());
  }
  if (!draining_) {
    DoStop();
    co_return;
  }
  // Draining: every request read has been handed on; the writer closes once their answers are out.
  reader_done_ = true;
  wakeup_.cancel();
}

asio::awaitable<void> Connection::Watchdog() {
  using Clock = std::chrono::steady_clock;
  const Clock::duration period =
      std::min<Clock::duration>({std::chrono::seconds(1), options_.frame_timeout / 4, options_.backlog_timeout / 4});
  boost::system::error_code ec;
  while (!stopped_) {
    watchdog_timer_.expires_after(std::max<Clock::duration>(period, std::chrono::milliseconds(1)));
    co_await watchdog_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopped_) co_return;
    const Clock::time_point now = Clock::now();
    if (!reader_paused_ && frame_started_ && now - *frame_started_ > options_.frame_timeout) {
      static common::LogRateLimit limit("connections closed for an incomplete frame");
      common::LogWarnLimited(limit, "connection uid={}: closing: a request frame started {} ms ago is still incomplete",
                             peer_uid_, options_.frame_timeout.count());
      DoStop();
    } else if (backlogged_since_ && now - *backlogged_since_ > options_.backlog_timeout) {
      static common::LogRateLimit limit("connections closed for unread replies");
      common::LogWarnLimited(limit, "connection uid={}: closing: the client has not read its replies for {} ms "
                             "({} bytes waiting)", peer_uid_, options_.backlog_timeout.count(), queued_bytes_.load());
      DoStop();
    }
  }
}

asio::awaitable<void> Connection::Writer() {
  boost::system::error_code ec;
  std::string batch;
  while (!stopped_) {
    if (outgoing_.empty()) {
      // Draining ends when the reader has handed on its last request, every request has its final
      // response queued, and every queued answer (some are still being posted to the strand) has
      // been written.
      if (draining_ && reader_done_ && requests_.empty() && queued_frames_.load() == 0) break;
      wakeup_.expires_at(std::chrono::steady_clock::time_point::max());
      co_await wakeup_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    batch.clear();
    size_t frames = 0;
    while (!outgoing_.empty() && batch.size() < kWriteBatchBytes) {
      batch += outgoing_.front();
      outgoing_.pop_front();
      ++frames;
    }
    co_await asio::async_write(socket_, asio::buffer(batch),
                               asio::redirect_error(asio::use_awaitable, ec));
    queued_bytes_ -= batch.size();
    queued_frames_ -= frames;
    if (reader_paused_ && !Backlogged()) resume_.cancel();
    if (ec) {
      if (ec != asio::error::operation_aborted) {
        common::LogDebug("connection uid={}: write: {}", peer_uid_, ec.message());
      }
      break;
    }
  }
  DoStop();
}

}  // namespace niels::daemon::server
