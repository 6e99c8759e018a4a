#include "daemon/http/http_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <fmt/format.h>

#include "common/log.h"
#include "common/wire_status.h"
#include "daemon/http/bound_session.h"
#include "daemon/http/loopback_access.h"
#include "daemon/http/routes.h"

namespace niels::daemon::http {
namespace {

using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

constexpr size_t kReadChunkBytes = 16 * 1024;
// How often a running call checks whether its client has gone away.
constexpr std::chrono::milliseconds kPeerCheckPeriod{200};
// How long a refused request's remaining bytes are read and dropped before the close.
constexpr std::chrono::milliseconds kLingerTime{1000};

// The X-Nielsd-Session header's value (bound_session.h); repeated headers joined by ", ", which
// no session id holds, so two of them are refused as a bad value.
std::optional<std::string> SessionHeader(const bhttp::request<bhttp::string_body>& request) {
  std::optional<std::string> value;
  auto [first, last] = request.equal_range(beast::string_view(kSessionHeader));
  for (auto it = first; it != last; ++it) {
    const std::string_view one(it->value().data(), it->value().size());
    value = value ? *value + ", " + std::string(one) : std::string(one);
  }
  return value;
}

}  // namespace

// (Not in the anonymous namespace: the call coroutine's frame holds one.)
namespace call_detail {

// The responses of one engine call (one or more native requests run together) on their way from
// the engine thread to the connection's strand. The events waiting of all its requests together
// are bounded by max_queued_bytes.
struct CallState {
  struct Slot {
    std::deque<niels::v1::Response> events;
    std::deque<std::chrono::steady_clock::time_point> arrived;  // when the sink got each event
    std::optional<niels::v1::Response> final;
    size_t queued_bytes = 0;  // of `events`
  };

  CallState(const asio::any_io_executor& executor, size_t max_queued_bytes, size_t requests)
      : timer(executor), max_queued_bytes(max_queued_bytes), slots(requests) {}

  asio::steady_timer timer;  // strand: the call sleeps on it; a delivered response cancels it
  const size_t max_queued_bytes;
  std::mutex mutex;
  std::vector<Slot> slots;  // GUARDED_BY(mutex), one per request
  size_t queued_bytes = 0;  // GUARDED_BY(mutex)
};

// The sink the engine sees for one request of a call: bounded events, then the final response;
// each wakes the call.
class CallSink : public server::ResponseSink {
 public:
  CallSink(std::weak_ptr<CallState> state, size_t slot, asio::any_io_executor executor)
      : state_(std::move(state)), slot_(slot), executor_(std::move(executor)) {}

  bool Send(niels::v1::Response response, bool final) override {
    std::shared_ptr<CallState> state = state_.lock();
    if (state == nullptr) return false;
    {
      std::lock_guard lock(state->mutex);
      CallState::Slot& slot = state->slots[slot_];
      if (final) {
        slot.final = std::move(response);
      } else {
        const size_t bytes = response.ByteSizeLong();
        if (state->queued_bytes + bytes > state->max_queued_bytes) return false;
        state->queued_bytes += bytes;
        slot.queued_bytes += bytes;
        slot.events.push_back(std::move(response));
        slot.arrived.push_back(std::chrono::steady_clock::now());
      }
    }
    asio::post(executor_, [weak = state_] {
      if (std::shared_ptr<CallState> state = weak.lock()) state->timer.cancel();
    });
    return true;
  }

 private:
  std::weak_ptr<CallState> state_;
  const size_t slot_;
  asio::any_io_executor executor_;
};

// What the latency histograms need of each request of a call (only generations are observed).
struct CallTiming {
  bool generation = false;
  std::chrono::steady_clock::time_point submitted;
  std::optional<std::chrono::steady_clock::time_point> last_token;
  int64_t last_index = -1;
};

}  // namespace call_detail

namespace {

using call_detail::CallSink;
using call_detail::CallState;
using call_detail::CallTiming;

niels::v1::Response ErrorResponse(const common::Status& status) {
  niels::v1::Response response;
  *response.mutable_error() = common::ToProto(status);
  return response;
}

const char* ReasonFor(unsigned status) {
  switch (status) {
    case 499: return "Client Closed Request";
    default: return nullptr;
  }
}

}  // namespace

HttpConnection::HttpConnection(Socket socket, std::optional<common::OwnerId> owner, std::shared_ptr<FrontState> front)
    : stream_(std::move(socket)), owner_(owner), front_(std::move(front)) {}

HttpConnection::~HttpConnection() = default;

void HttpConnection::Start() {
  front_->Add(shared_from_this(), owner_);
  auto self = shared_from_this();
  asio::co_spawn(stream_.get_executor(), [self] { return self->Run(); }, [self](std::exception_ptr error) {
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        common::LogError("http connection of {}: {}; closing it", self->PeerText(), e.what());
      } catch (...) {
        common::LogError("http connection of {}: unknown exception; closing it", self->PeerText());
      }
    }
    self->DoStop();
  });
}

void HttpConnection::Stop() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoStop(); });
}

void HttpConnection::Drain() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    if (self->idle_) self->DoStop();
  });
}

void HttpConnection::DoStop() {
  if (stopped_) return;
  stopped_ = true;
  if (current_cancel_) current_cancel_->store(true);
  boost::system::error_code ignored;
  stream_.socket().shutdown(Socket::shutdown_both, ignored);
  stream_.close();
  front_->Remove(this, owner_);
}

std::string HttpConnection::PeerText() const {
  if (!owner_) return "an unauthenticated TCP peer";
  if (!principal_name_.empty()) return "API-key principal " + principal_name_;
  return common::DescribeOwner(*owner_);
}

bool HttpConnection::PeerGone() {
  if (stopped_ || broken_ || !stream_.socket().is_open()) return true;
  char byte;
  const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

asio::awaitable<void> HttpConnection::Run() {
  const HttpOptions& options = front_->options;
  boost::system::error_code ec;
  while (!stopped_ && !draining_) {
    if (buffer_.size() == 0) {
      idle_ = true;
      stream_.expires_after(options.idle_timeout);
      const size_t n = co_await stream_.async_read_some(buffer_.prepare(kReadChunkBytes),
                                                        asio::redirect_error(asio::use_awaitable, ec));
      idle_ = false;
      if (ec) break;
      buffer_.commit(n);
    }
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(options.max_header_bytes, UINT32_MAX)));
    parser.body_limit(options.max_body_bytes);
    stream_.expires_after(options.header_timeout);
    co_await bhttp::async_read_header(stream_, buffer_, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      keep_alive_ = parser.get().keep_alive();
      version_ = parser.get().version();
      if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        stream_.expires_after(options.write_timeout);
        co_await asio::async_write(stream_, asio::buffer(kContinue), asio::redirect_error(asio::use_awaitable, ec));
      }
    }
    if (!ec) {
      // The body's deadline cancels the read but keeps the socket (the stream's own expiry would
      // close it), so the client is told 408.
      stream_.expires_never();
      asio::steady_timer body_deadline(stream_.get_executor());
      auto body_timed_out = std::make_shared<bool>(false);
      auto body_done = std::make_shared<bool>(false);
      body_deadline.expires_after(options.body_timeout);
      body_deadline.async_wait([self = shared_from_this(), body_timed_out, body_done](const boost::system::error_code& error) {
        if (error || *body_done || self->stopped_) return;
        *body_timed_out = true;
        boost::system::error_code ignored;
        self->stream_.socket().cancel(ignored);
      });
      co_await bhttp::async_read(stream_, buffer_, parser, asio::redirect_error(asio::use_awaitable, ec));
      *body_done = true;
      body_deadline.cancel();
      if (*body_timed_out) {
        co_await RefuseAndClose(408, fmt::format("the request body did not arrive within {} ms",
                                                 options.body_timeout.count()),
                                ErrorShapeOf(std::string_view(parser.get().target().data(), parser.get().target().size())));
        break;
      }
    }
    if (ec) {
      if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted || stopped_) {
        break;
      }
      // The API the request was for answers in its error shape, once its request line was read (a
      // Content-Length past the body limit is refused before the head is done).
      const ErrorShape shape =
          ErrorShapeOf(std::string_view(parser.get().target().data(), parser.get().target().size()));
      if (ec == bhttp::error::header_limit) {
        co_await RefuseAndClose(431, fmt::format("the request head is larger than {} bytes", options.max_header_bytes));
      } else if (ec == bhttp::error::body_limit) {
        co_await RefuseAndClose(413, fmt::format("the request body is larger than {} bytes", options.max_body_bytes),
                                shape);
      } else {
        co_await RefuseAndClose(400, "malformed HTTP request: " + ec.message(), shape);
      }
      break;
    }
    stream_.expires_never();
    bhttp::request<bhttp::string_body> request = parser.release();
    const Method method = request.method() == bhttp::verb::get    ? Method::kGet
                          : request.method() == bhttp::verb::post ? Method::kPost
                                                                  : Method::kOther;
    answer_ = Answer::kNone;
    const bool shutting_down = front_->shutting_down.load();
    if (shutting_down || draining_) keep_alive_ = false;
    answer_status_ = 0;
    endpoint_ = nullptr;
    if (front_->options.tcp && !co_await AdmitOnTcp(request)) {
      if (stopped_) break;
      front_->counters.Count("other", answer_status_);
      if (!keep_alive_ || broken_) break;
      continue;
    }
    RouteContext context{shutting_down, &front_->counters, front_->size(), SessionHeader(request)};
    const char* endpoint = co_await Route(*this, method, std::string_view(request.target().data(), request.target().size()),
                                          request.body(), std::move(context));
    if (answer_ == Answer::kNone && !broken_) {
      co_await RespondError(WithShape(MakeError(500, "the request got no answer"),
                                      ErrorShapeOf(std::string_view(request.target().data(), request.target().size()))));
    }
    front_->counters.Count(endpoint, answer_status_);
    if (!keep_alive_ || broken_ || answer_ == Answer::kStreaming) break;
  }
  DoStop();
}

asio::awaitable<void> HttpConnection::RefuseAndClose(unsigned status, const std::string& message, ErrorShape shape) {
  keep_alive_ = false;
  answer_ = Answer::kNone;
  front_->counters.Count("other", status);
  co_await RespondError(WithShape(MakeError(status, message), shape));
  if (broken_) co_return;
  // Let the client finish sending (and so read the answer instead of a reset), within bounds.
  boost::system::error_code ec;
  stream_.socket().shutdown(Socket::shutdown_send, ec);
  stream_.expires_after(kLingerTime);
  std::array<char, kReadChunkBytes> discard;
  while (!ec) co_await stream_.async_read_some(asio::buffer(discard), asio::redirect_error(asio::use_awaitable, ec));
}

namespace {

std::optional<std::string_view> HeaderOf(const bhttp::request<bhttp::string_body>& request, bhttp::field field) {
  auto it = request.find(field);
  if (it == request.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

std::optional<std::string_view> HeaderOf(const bhttp::request<bhttp::string_body>& request, std::string_view name) {
  auto it = request.find(beast::string_view(name.data(), name.size()));
  if (it == request.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// The key of "Bearer KEY" (the scheme case-insensitive), or nullopt.
std::optional<std::string_view> BearerKey(std::string_view authorization) {
  authorization = Trimmed(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !beast::iequals(beast::string_view(authorization.data(), kScheme.size()),
                      beast::string_view(kScheme.data(), kScheme.size())) ||
      (authorization[kScheme.size()] != ' ' && authorization[kScheme.size()] != '\t')) {
    return std::nullopt;
  }
  return Trimmed(authorization.substr(kScheme.size()));
}

}  // namespace

asio::awaitable<bool> HttpConnection::AdmitOnTcp(const bhttp::request<bhttp::string_body>& request) {
  const TcpListenOptions& tcp = *front_->options.tcp;
  const std::string_view target(request.target().data(), request.target().size());
  const ErrorShape shape = ErrorShapeOf(target);
  if (std::optional<std::string> refusal = HostOriginRefusal(
          HeaderOf(request, bhttp::field::host), HeaderOf(request, bhttp::field::origin), tcp.host_origin)) {
    co_await RespondError(WithShape(MakeError(403, *refusal, "", "host_or_origin_refused"), shape));
    co_return false;
  }
  std::optional<std::string_view> presented;
  if (std::optional<std::string_view> authorization = HeaderOf(request, bhttp::field::authorization)) {
    presented = BearerKey(*authorization);
    if (!presented) {
      co_await RespondError(WithShape(
          MakeError(401, "the Authorization header is not `Bearer KEY`", "", "invalid_api_key"), shape));
      co_return false;
    }
  } else if (shape == ErrorShape::kAnthropic) {
    // Anthropic's clients send their key as x-api-key.
    if (std::optional<std::string_view> key = HeaderOf(request, "x-api-key")) presented = Trimmed(*key);
  }
  if (!presented) {
    co_await RespondError(WithShape(
        MakeError(401,
                  shape == ErrorShape::kAnthropic
                      ? "no API key: send `x-api-key: KEY` or `Authorization: Bearer KEY` with a key of nielsd --api-keys"
                      : "no API key: send `Authorization: Bearer KEY` with a key of nielsd --api-keys",
                  "", "invalid_api_key"),
        shape));
    co_return false;
  }
  const ApiKeyPrincipal* principal = tcp.keys->Find(*presented);
  if (principal == nullptr) {
    static common::LogRateLimit limit("http requests with an unknown API key");
    common::LogWarnLimited(limit, "http: refused a request on {} with an unknown API key", EndpointText(tcp.endpoint));
    co_await RespondError(
        WithShape(MakeError(401, "the API key is not one of nielsd's (--api-keys)", "", "invalid_api_key"), shape));
    co_return false;
  }
  if (owner_ != principal->owner) {
    // Stopped meanwhile: the front no longer counts the connection, so it must not count it again.
    if (stopped_) co_return false;
    const size_t limit = front_->options.max_connections_per_uid;
    if (!front_->Rebind(owner_, principal->owner, limit)) {
      keep_alive_ = false;
      co_await RespondError(WithShape(
          MakeError(429,
                    fmt::format("API-key principal {} has {} HTTP connections open to nielsd, the limit per user "
                                "(--max-connections-per-uid); close some first",
                                principal->name, front_->CountFor(principal->owner)),
                    "", "too_many_connections", 1),
          shape));
      co_return false;
    }
    owner_ = principal->owner;
    principal_name_ = principal->name;
  }
  co_return true;
}

asio::awaitable<void> HttpConnection::Write(unsigned status, std::string body, uint32_t retry_after_s,
                                            const std::string& content_type) {
  if (broken_ || stopped_ || answer_ != Answer::kNone) co_return;
  answer_ = Answer::kResponded;
  answer_status_ = status;
  bhttp::response<bhttp::string_body> response{static_cast<bhttp::status>(status), version_};
  if (const char* reason = ReasonFor(status)) response.reason(reason);
  response.set(bhttp::field::server, "nielsd");
  response.set(bhttp::field::content_type, content_type);
  if (retry_after_s > 0) response.set(bhttp::field::retry_after, std::to_string(retry_after_s));
  response.keep_alive(keep_alive_ && !draining_);
  response.body() = std::move(body);
  response.prepare_payload();
  boost::system::error_code ec;
  stream_.expires_after(front_->options.write_timeout);
  co_await bhttp::async_write(stream_, response, asio::redirect_error(asio::use_awaitable, ec));
  stream_.expires_never();
  if (ec) broken_ = true;
}

asio::awaitable<void> HttpConnection::Respond(unsigned status, std::string body, std::string content_type) {
  co_await Write(status, std::move(body), 0, content_type);
}

asio::awaitable<void> HttpConnection::RespondError(const ApiError& error) {
  co_await Write(error.status, ErrorBody(error), error.retry_after_s, "application/json");
}

asio::awaitable<bool> HttpConnection::BeginEvents() {
  if (broken_ || stopped_ || answer_ != Answer::kNone) co_return false;
  answer_ = Answer::kStreaming;
  answer_status_ = 200;
  bhttp::response<bhttp::empty_body> head{bhttp::status::ok, version_};
  head.set(bhttp::field::server, "nielsd");
  head.set(bhttp::field::content_type, "text/event-stream");
  head.set(bhttp::field::cache_control, "no-cache");
  // HTTP/1.0 has no chunked encoding: the stream then ends with the connection.
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  head.keep_alive(keep_alive_ && !draining_);
  head.chunked(chunked_);
  bhttp::response_serializer<bhttp::empty_body> serializer{head};
  boost::system::error_code ec;
  stream_.expires_after(front_->options.write_timeout);
  co_await bhttp::async_write_header(stream_, serializer, asio::redirect_error(asio::use_awaitable, ec));
  stream_.expires_never();
  if (ec) broken_ = true;
  co_return !broken_;
}

asio::awaitable<bool> HttpConnection::SendEvent(std::string_view data) {
  std::string event;
  event.reserve(data.size() + 8);
  event += "data: ";
  event += data;
  event += "\n\n";
  co_return co_await WriteEvent(event);
}

asio::awaitable<bool> HttpConnection::SendNamedEvent(std::string_view name, std::string_view data) {
  std::string event;
  event.reserve(name.size() + data.size() + 16);
  event += "event: ";
  event += name;
  event += "\ndata: ";
  event += data;
  event += "\n\n";
  co_return co_await WriteEvent(event);
}

asio::awaitable<bool> HttpConnection::WriteEvent(const std::string& event) {
  if (broken_ || stopped_ || answer_ != Answer::kStreaming) co_return false;
  boost::system::error_code ec;
  stream_.expires_after(front_->options.write_timeout);
  if (chunked_) {
    co_await asio::async_write(stream_, bhttp::make_chunk(asio::buffer(event)),
                               asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await asio::async_write(stream_, asio::buffer(event), asio::redirect_error(asio::use_awaitable, ec));
  }
  stream_.expires_never();
  if (ec) broken_ = true;
  co_return !broken_;
}

asio::awaitable<void> HttpConnection::EndEvents() {
  if (broken_ || stopped_ || answer_ != Answer::kStreaming) co_return;
  answer_ = Answer::kStreamEnded;
  if (!chunked_) co_return;
  boost::system::error_code ec;
  stream_.expires_after(front_->options.write_timeout);
  co_await asio::async_write(stream_, bhttp::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
  stream_.expires_never();
  if (ec) broken_ = true;
}

asio::awaitable<niels::v1::Response> HttpConnection::Call(niels::v1::Request request, EventHandler on_event) {
  IndexedEventHandler indexed;
  if (on_event) {
    indexed = [&on_event](size_t, const niels::v1::TokenEvent& event) { return on_event(event); };
  }
  std::vector<niels::v1::Request> requests;
  requests.push_back(std::move(request));
  std::vector<niels::v1::Response> responses = co_await DoCalls(std::move(requests), indexed, /*cancellable=*/true);
  co_return std::move(responses.front());
}

asio::awaitable<std::vector<niels::v1::Response>> HttpConnection::CallAll(std::vector<niels::v1::Request> requests,
                                                                          IndexedEventHandler on_event) {
  co_return co_await DoCalls(std::move(requests), std::move(on_event), /*cancellable=*/true);
}

asio::awaitable<niels::v1::Response> HttpConnection::CallToEnd(niels::v1::Request request) {
  std::vector<niels::v1::Request> requests;
  requests.push_back(std::move(request));
  std::vector<niels::v1::Response> responses = co_await DoCalls(std::move(requests), nullptr, /*cancellable=*/false);
  co_return std::move(responses.front());
}

namespace {

// The stats of a generation's final response (nullptr for other kinds and errors).
const niels::v1::GenerationStats* GenerationStatsOf(const niels::v1::Response& response) {
  if (response.has_chat()) return &response.chat().stats();
  if (response.has_generate()) return &response.generate().stats();
  return nullptr;
}

}  // namespace

void HttpConnection::SubmitOne(server::RequestService& service, niels::v1::Request& request,
                               const std::shared_ptr<call_detail::CallState>& state,
                               const std::shared_ptr<std::atomic<bool>>& cancel, size_t slot,
                               call_detail::CallTiming* timing) {
  timing->generation = request.kind_case() == niels::v1::Request::kChat ||
                       request.kind_case() == niels::v1::Request::kGenerate;
  timing->submitted = Clock::now();
  request.set_request_id(++next_request_id_);
  service.Submit(server::Job(server::Caller{*owner_}, std::move(request), cancel,
                             std::make_shared<CallSink>(state, slot, stream_.get_executor())));
}

asio::awaitable<std::vector<niels::v1::Response>> HttpConnection::DoCalls(std::vector<niels::v1::Request> requests,
                                                                         IndexedEventHandler on_event,
                                                                         bool cancellable) {
  const size_t count = requests.size();
  std::vector<niels::v1::Response> responses(count);
  const HttpOptions& options = front_->options;
  if (!owner_) {  // AdmitOnTcp names the owner before any route runs
    for (niels::v1::Response& response : responses) {
      response = ErrorResponse(common::Status::PermissionDenied("the request has no API key"));
    }
    co_return responses;
  }
  if (options.overflow_uid && *owner_ == common::UidOwner(*options.overflow_uid) &&
      requests.front().kind_case() == niels::v1::Request::kCreateSession) {
    responses.front() = ErrorResponse(common::Status::PermissionDenied(fmt::format(
        "nielsd sees your uid as {}, the kernel's overflow uid: your real uid is not mapped into nielsd's user "
        "namespace, so nielsd gives you no sessions",
        *options.overflow_uid)));
    co_return responses;
  }
  server::RequestService* service = front_->service.load();
  if (service == nullptr) {
    for (niels::v1::Response& response : responses) {
      response = ErrorResponse(common::Status::Unavailable("nielsd is not serving yet"));
    }
    co_return responses;
  }
  const asio::any_io_executor executor = stream_.get_executor();
  auto state = std::make_shared<CallState>(executor, options.max_queued_bytes, count);
  // One flag for all the requests of the call: a refused event or a gone client cancels them all.
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  if (cancellable) {
    current_cancel_ = cancel;
    if (stopped_) cancel->store(true);
  }
  std::vector<CallTiming> timings(count);
  std::vector<bool> done(count, false);
  SubmitOne(*service, requests[0], state, cancel, 0, &timings[0]);
  bool others_submitted = count == 1;
  bool delivering = on_event != nullptr;
  size_t finished = 0;
  boost::system::error_code ec;
  for (;;) {
    bool progressed = false;
    bool first_started = false;  // requests[0] has sent an event or finished
    for (size_t i = 0; i < count; ++i) {
      if (done[i] || (i > 0 && !others_submitted)) continue;
      std::deque<niels::v1::Response> events;
      std::deque<Clock::time_point> arrived;
      std::optional<niels::v1::Response> final;
      {
        std::lock_guard lock(state->mutex);
        CallState::Slot& slot = state->slots[i];
        events.swap(slot.events);
        arrived.swap(slot.arrived);
        state->queued_bytes -= slot.queued_bytes;
        slot.queued_bytes = 0;
        if (events.empty()) final = std::move(slot.final);
      }
      if (!events.empty()) {
        progressed = true;
        if (i == 0) first_started = true;
        for (size_t e = 0; e < events.size(); ++e) {
          const niels::v1::Response& event = events[e];
          if (!event.has_token()) continue;
          CallTiming& timing = timings[i];
          // When the engine handed the token over (not when the strand got to it: a write of the
          // previous event may have held it).
          const Clock::time_point now = arrived[e];
          if (timing.generation && endpoint_ != nullptr && event.token().index() != timing.last_index) {
            const double seconds =
                std::chrono::duration<double>(now - (timing.last_token ? *timing.last_token : timing.submitted)).count();
            if (timing.last_token) {
              front_->counters.ObserveTokenGap(endpoint_, seconds);
            } else {
              front_->counters.ObserveFirstToken(endpoint_, seconds);
            }
            timing.last_token = now;
            timing.last_index = event.token().index();
          }
          if (!delivering) continue;
          if (!co_await on_event(i, event.token())) {
            delivering = false;
            cancel->store(true);
          }
        }
        continue;
      }
      if (final) {
        progressed = true;
        if (i == 0) first_started = true;
        const niels::v1::GenerationStats* stats = GenerationStatsOf(*final);
        if (timings[i].generation && endpoint_ != nullptr && stats != nullptr && !timings[i].last_token &&
            stats->generated_tokens() > 0) {
          // Not streamed: the engine's own measures (its queue and first-token time; the decode
          // rate over the tokens after the first).
          front_->counters.ObserveFirstToken(endpoint_, (stats->queue_ms() + stats->time_to_first_token_ms()) / 1000.0);
          if (stats->generated_tokens() >= 2 && stats->decode_tokens_per_s() > 0) {
            front_->counters.ObserveTokenGap(endpoint_, 1.0 / stats->decode_tokens_per_s(),
                                             static_cast<uint64_t>(stats->generated_tokens() - 1));
          }
        }
        responses[i] = std::move(*final);
        done[i] = true;
        ++finished;
      }
    }
    if (first_started && !others_submitted) {
      others_submitted = true;
      progressed = true;
      // The first failed before its first token: the others would fail the same way (or are moot).
      const bool first_failed = done[0] && responses[0].has_error();
      for (size_t i = 1; i < count; ++i) {
        if (first_failed) {
          responses[i] = responses[0];
          done[i] = true;
          ++finished;
        } else {
          SubmitOne(*service, requests[i], state, cancel, i, &timings[i]);
        }
      }
    }
    if (finished == count) {
      if (cancellable) current_cancel_.reset();
      co_return responses;
    }
    if (progressed) continue;  // look again before sleeping: a wake-up may have come meanwhile
    if (cancellable && !cancel->load() && PeerGone()) cancel->store(true);
    state->timer.expires_after(kPeerCheckPeriod);
    co_await state->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<std::optional<ApiError>> HttpConnection::Model(ModelView* model) {
  if (std::optional<ModelView> cached = front_->model()) {
    *model = *cached;
    co_return std::nullopt;
  }
  niels::v1::Request request;
  request.mutable_info();
  niels::v1::Response response = co_await Call(std::move(request), nullptr);
  if (response.has_error()) co_return FromStatus(common::FromProto(response.error()));
  ModelView view;
  view.id = response.info().model_name().empty() ? "nielsd" : response.info().model_name();
  view.context = response.info().context();
  view.reasoning = response.info().reasoning();
  view.vocab_size = response.info().vocab_size();
  front_->set_model(view);
  *model = std::move(view);
  co_return std::nullopt;
}

}  // namespace niels::daemon::http
