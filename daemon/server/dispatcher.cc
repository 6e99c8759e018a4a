#include "daemon/server/dispatcher.h"

#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/status.h"
#include "common/wire_status.h"
#include "daemon/server/connection_registry.h"

namespace niels::daemon::server {
namespace {

niels::v1::Response ErrorResponse(uint64_t request_id, const common::Status& status) {
  niels::v1::Response response;
  response.set_request_id(request_id);
  *response.mutable_error() = common::ToProto(status);
  return response;
}

// Wraps the sink of a Stats or Info request: adds what only the server knows (the connection
// counts; the largest accepted frame).
class ServerFieldsSink : public ResponseSink {
 public:
  ServerFieldsSink(std::shared_ptr<ResponseSink> inner, const ConnectionRegistry& registry, uint64_t max_frame_bytes)
      : inner_(std::move(inner)), registry_(registry), max_frame_bytes_(max_frame_bytes) {}

  bool Send(niels::v1::Response response, bool final) override {
    if (response.has_stats()) {
      response.mutable_stats()->set_connections(static_cast<uint32_t>(registry_.size()));
      response.mutable_stats()->set_connections_refused_total(registry_.refused_total());
    }
    if (response.has_info()) response.mutable_info()->set_max_frame_bytes(max_frame_bytes_);
    return inner_->Send(std::move(response), final);
  }

 private:
  std::shared_ptr<ResponseSink> inner_;
  const ConnectionRegistry& registry_;
  const uint64_t max_frame_bytes_;
};

// Requests that make the caller the owner of a new session.
bool CreatesSession(const niels::v1::Request& request) {
  return request.kind_case() == niels::v1::Request::kCreateSession ||
         request.kind_case() == niels::v1::Request::kForkSession;
}

}  // namespace

Dispatcher::Dispatcher(RequestService& service, const ConnectionRegistry& registry, DispatcherOptions options)
    : service_(service), registry_(registry), options_(options) {}

RequestHandler DispatchTo(Dispatcher& dispatcher) {
  return [&dispatcher](RequestChannel& channel, niels::v1::Request request) {
    dispatcher.Dispatch(channel, std::move(request));
  };
}

std::optional<uint32_t> ReadOverflowUid(const std::string& path) {
  std::ifstream file(path);
  uint32_t uid = 0;
  if (file >> uid) return uid;
  return std::nullopt;
}

void Dispatcher::Dispatch(RequestChannel& connection, niels::v1::Request request) {
  const uint64_t id = request.request_id();
  switch (request.kind_case()) {
    case niels::v1::Request::KIND_NOT_SET:
      connection.SendNow(ErrorResponse(
          id, common::Status::Unimplemented(
                  "request " + std::to_string(id) +
                  " has no request kind this daemon knows (protocol niels.v1)")));
      return;
    case niels::v1::Request::kCancel: {
      if (connection.InFlight(id)) break;  // a duplicate id: refused below, the cancel not carried out
      niels::v1::Response response;
      response.set_request_id(id);
      response.mutable_cancel()->set_found(
          connection.CancelRequest(request.cancel().target_request_id(), request.cancel().keep_output()));
      connection.SendNow(response);
      return;
    }
    default:
      break;
  }
  if (connection.InFlight(id)) {
    connection.SendNow(ErrorResponse(
        id, common::Status::InvalidArgument("request_id " + std::to_string(id) +
                                            " is already in flight on this connection")));
    return;
  }
  if (options_.overflow_uid && connection.peer_uid() == *options_.overflow_uid && CreatesSession(request)) {
    connection.SendNow(ErrorResponse(
        id, common::Status::PermissionDenied(fmt::format(
                "nielsd sees your uid as {}, the kernel's overflow uid (/proc/sys/kernel/overflowuid): "
                "your real uid is not mapped into nielsd's user namespace, so nielsd cannot tell you "
                "from other users and gives you no sessions (does nielsd run with PrivateUsers= or in "
                "a container?)",
                *options_.overflow_uid))));
    return;
  }
  std::optional<RequestChannel::Tracked> tracked = connection.Track(id);
  if (!tracked) return;  // in flight already: refused above
  std::shared_ptr<ResponseSink> sink = std::move(tracked->sink);
  if (request.kind_case() == niels::v1::Request::kStats || request.kind_case() == niels::v1::Request::kInfo) {
    sink = std::make_shared<ServerFieldsSink>(std::move(sink), registry_, options_.max_frame_bytes);
  }
  Job job(Caller{common::UidOwner(connection.peer_uid())}, std::move(request), std::move(tracked->cancel), std::move(sink));
  job.set_stop(std::move(tracked->stop));
  service_.Submit(std::move(job));
}

}  // namespace niels::daemon::server
