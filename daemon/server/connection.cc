#include "daemon/server/connection.h"

#include <array>
#include <chrono>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/log.h"
#include "common/wire_status.h"
#include "daemon/server/connection_registry.h"
#include "daemon/server/dispatcher.h"

namespace niels::daemon::server {
namespace {

namespace asio = boost::asio;
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kWriteBatchBytes = 256 * 1024;

// The sink the engine sees for one request: echoes the id, enforces the output bound, and turns
// a refused event into a cancelled request.
class ConnectionSink : public engine::ResponseSink {
 public:
  ConnectionSink(std::weak_ptr<Connection> connection, uint64_t request_id,
                 std::shared_ptr<std::atomic<bool>> cancel)
      : connection_(std::move(connection)), request_id_(request_id), cancel_(std::move(cancel)) {}

  bool Send(niels::v1::Response response, bool final) override {
    if (refused_.load() && !final) return false;
    response.set_request_id(request_id_);
    std::shared_ptr<Connection> connection = connection_.lock();
    bool accepted = connection != nullptr &&
                    connection->Enqueue(common::EncodeFrame(response), /*bounded=*/!final,
                                        final ? std::optional<uint64_t>(request_id_) : std::nullopt);
    if (!accepted && !final) {
      refused_.store(true);
      cancel_->store(true);
    }
    return accepted;
  }

 private:
  std::weak_ptr<Connection> connection_;
  const uint64_t request_id_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::atomic<bool> refused_{false};
};

}  // namespace

Connection::Connection(Socket socket, uint32_t peer_uid, Dispatcher& dispatcher,
                       ConnectionRegistry& registry, ConnectionOptions options)
    : socket_(std::move(socket)),
      peer_uid_(peer_uid),
      dispatcher_(dispatcher),
      registry_(registry),
      options_(options),
      decoder_(options.max_frame_bytes),
      wakeup_(socket_.get_executor()) {}

Connection::~Connection() = default;

void Connection::Start() {
  registry_.Add(shared_from_this());
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), [self] { return self->Reader(); }, asio::detached);
  asio::co_spawn(socket_.get_executor(), [self] { return self->Writer(); }, asio::detached);
}

void Connection::Stop() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->DoStop(); });
}

void Connection::Drain() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    self->wakeup_.cancel();
  });
}

void Connection::DoStop() {
  if (stopped_) return;
  stopped_ = true;
  closed_.store(true);
  for (auto& [id, cancel] : requests_) cancel->store(true);
  requests_.clear();
  outgoing_.clear();
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  wakeup_.cancel();
  registry_.Remove(this);
}

std::shared_ptr<std::atomic<bool>> Connection::TrackRequest(uint64_t request_id) {
  auto [it, inserted] = requests_.try_emplace(request_id, nullptr);
  if (!inserted) return nullptr;
  it->second = std::make_shared<std::atomic<bool>>(false);
  return it->second;
}

bool Connection::CancelRequest(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  it->second->store(true);
  return true;
}

std::shared_ptr<engine::ResponseSink> Connection::MakeSink(
    uint64_t request_id, std::shared_ptr<std::atomic<bool>> cancel) {
  return std::make_shared<ConnectionSink>(weak_from_this(), request_id, std::move(cancel));
}

void Connection::SendNow(const niels::v1::Response& response) {
  Enqueue(common::EncodeFrame(response), /*bounded=*/false, std::nullopt);
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
    common::LogWarn("connection uid={}: {}", peer_uid_, parsed.message());
    niels::v1::Response response;
    response.set_request_id(0);
    *response.mutable_error() = common::ToProto(
        common::Status::InvalidArgument("frame is not a valid niels.v1.Request: " + parsed.message()));
    SendNow(response);
    return;
  }
  dispatcher_.Dispatch(*this, std::move(request));
}

asio::awaitable<void> Connection::Reader() {
  auto buffer = std::make_unique<std::array<char, kReadChunkBytes>>();
  std::string payload;
  boost::system::error_code ec;
  while (!stopped_ && !draining_) {
    size_t n = co_await socket_.async_read_some(asio::buffer(*buffer),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    decoder_.Feed(std::string_view(buffer->data(), n));
    for (;;) {
      common::FrameDecoder::Result result = decoder_.Next(&payload);
      if (result == common::FrameDecoder::Result::kNeedMore) break;
      if (result == common::FrameDecoder::Result::kError) {
        common::LogWarn("connection uid={}: closing: {}", peer_uid_, decoder_.error().ToString());
        DoStop();
        co_return;
      }
      HandleFrame(payload);
      if (stopped_) co_return;
    }
  }
  if (ec == asio::error::eof) {
    common::Status finished = decoder_.Finish();
    if (!finished.ok()) common::LogWarn("connection uid={}: {}", peer_uid_, finished.ToString());
  } else if (ec && ec != asio::error::operation_aborted) {
    common::LogDebug("connection uid={}: read: {}", peer_uid_, ec.message());
  }
  if (!draining_) DoStop();
}

asio::awaitable<void> Connection::Writer() {
  boost::system::error_code ec;
  std::string batch;
  while (!stopped_) {
    if (outgoing_.empty()) {
      if (draining_) break;
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
