#pragma once
// Exchange: one HTTP request as an API handler sees it -- a way to call the engine (native
// niels.v1 requests, through the same RequestService the protobuf socket uses, as the peer's uid),
// the loaded model's identity, and a way to answer: one JSON response, or a stream of Server-Sent
// Events. HttpConnection implements it; the API files (openai_chat.cc, ...) know nothing else of
// HTTP, and nothing of HTTP or JSON reaches the engine.
//
// Threading: every method runs on the connection's strand, in the handler's coroutine.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "daemon/http/api_error.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

// What the API handlers need to know of the loaded model (from Info).
struct ModelView {
  std::string id;         // the model's name (Info.model_name; "nielsd" when it has none)
  int64_t context = 0;    // tokens of context served (Info.context)
  bool reasoning = false; // replies may carry reasoning
  int64_t vocab_size = 0; // ids of the vocabulary (Info.vocab_size); 0 = unknown
};

class Exchange {
 public:
  // Gets each stream event of a call; returns false to stop the call (it is then cancelled).
  using EventHandler = std::function<boost::asio::awaitable<bool>(const niels::v1::TokenEvent& event)>;
  // Gets each stream event of a call of several requests with the index of its request.
  using IndexedEventHandler =
      std::function<boost::asio::awaitable<bool>(size_t index, const niels::v1::TokenEvent& event)>;

  virtual ~Exchange() = default;

  // Runs one native request to its final response (a result, or one with an Error: CANCELLED when
  // the client went away or `on_event` refused an event). Stream events go to `on_event` in order,
  // each awaited before the next. The request's id is set here.
  virtual boost::asio::awaitable<niels::v1::Response> Call(niels::v1::Request request,
                                                           EventHandler on_event = nullptr) = 0;
  // Runs several native requests as one call (the choices of one HTTP request): requests[0] alone
  // until it has sent its first stream event or finished, then the others at once -- so that, when
  // they share requests[0]'s prompt, they find its whole blocks in the prefix index and prefill only
  // what follows them (requests[0] should stream: without events the others wait for its end).
  // Events go to `on_event` with their request's index, each awaited before the
  // next; one refused event or the client going away cancels them all. The events waiting of all
  // the requests together keep the one call's bound. If requests[0] fails before its first event,
  // the others are not submitted and get its error. The final responses, in the requests' order.
  virtual boost::asio::awaitable<std::vector<niels::v1::Response>> CallAll(std::vector<niels::v1::Request> requests,
                                                                           IndexedEventHandler on_event) = 0;
  // Like Call, but never cancelled by the client going away (to delete a request's ephemeral
  // session after it).
  virtual boost::asio::awaitable<niels::v1::Response> CallToEnd(niels::v1::Request request) = 0;
  // Names the route the request is for (one of the routes' static labels), for the latency
  // histograms of /metrics: the Chat and Generate calls after it are observed under it.
  virtual void SetEndpoint(const char* endpoint) = 0;
  // The loaded model (Info, asked once per daemon), or the error that prevented asking.
  virtual boost::asio::awaitable<std::optional<ApiError>> Model(ModelView* model) = 0;

  // One complete response (JSON unless said otherwise).
  virtual boost::asio::awaitable<void> Respond(unsigned status, std::string body,
                                               std::string content_type = "application/json") = 0;
  virtual boost::asio::awaitable<void> RespondError(const ApiError& error) = 0;
  // A 200 text/event-stream response (chunked): its head, then events `data: <json>\n\n` (or, named,
  // `event: <name>\ndata: <json>\n\n`), then the end. SendEvent and SendNamedEvent return false once
  // the client is gone or has not read for the write timeout. `data` and `name` must not hold a
  // newline (JSON dumped compactly has none).
  virtual boost::asio::awaitable<bool> BeginEvents() = 0;
  virtual boost::asio::awaitable<bool> SendEvent(std::string_view data) = 0;
  virtual boost::asio::awaitable<bool> SendNamedEvent(std::string_view name, std::string_view data) = 0;
  virtual boost::asio::awaitable<void> EndEvents() = 0;
};

}  // namespace niels::daemon::http
