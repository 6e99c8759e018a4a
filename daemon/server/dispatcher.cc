#include "daemon/server/dispatcher.h"

#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/status.h"
#include "common/wire_status.h"
#include "daemon/server/connection.h"
#include "daemon/server/connection_registry.h"

namespace niels::daemon::server {
namespace {

niels::v1::Response ErrorResponse(uint64_t request_id, const common::Status& status) {
  niels::v1::Response response;
  response.set_request_id(request_id);
  *response.mutable_error() = common::ToProto(status);
  return response;
}

// Wraps a Stats request's sink: adds the connection counts, which only the server knows.
class StatsSink : public ResponseSink {
 public:
  StatsSink(std::shared_ptr<ResponseSink> inner, const ConnectionRegistry& registry)
      : inner_(std::move(inner)), registry_(registry) {}

  bool Send(niels::v1::Response response, bool final) override {
    if (response.has_stats()) {
      response.mutable_stats()->set_connections(static_cast<uint32_t>(registry_.size()));
      response.mutable_stats()->set_connections_refused_total(registry_.refused_total());
    }
    return inner_->Send(std::move(response), final);
  }

 private:
  std::shared_ptr<ResponseSink> inner_;
  const ConnectionRegistry& registry_;
};

// Requests that make the caller the owner of a new session.
bool CreatesSession(const niels::v1::Request& request) {
  return request.kind_case() == niels::v1::Request::kCreateSession ||
         request.kind_case() == niels::v1::Request::kForkSession;
}

}  // namespace

Dispatcher::Dispatcher(RequestService& service, const ConnectionRegistry& registry,
                       std::optional<uint32_t> overflow_uid)
    : service_(service), registry_(registry), overflow_uid_(overflow_uid) {}

std::optional<uint32_t> ReadOverflowUid(const std::string& path) {
  std::ifstream file(path);
  uint32_t uid = 0;
  if (file >> uid) return uid;
  return std::nullopt;
}

void Dispatcher::Dispatch(Connection& connection, niels::v1::Request request) {
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
          connection.CancelRequest(request.cancel().target_request_id()));
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
  if (overflow_uid_ && connection.peer_uid() == *overflow_uid_ && CreatesSession(request)) {
    connection.SendNow(ErrorResponse(
        id, common::Status::PermissionDenied(fmt::format(
                "nielsd sees your uid as {}, the kernel's overflow uid (/proc/sys/kernel/overflowuid): "
                "your real uid is not mapped into nielsd's user namespace, so nielsd cannot tell you "
                "from other users and gives you no sessions (does nielsd run with PrivateUsers= or in "
                "a container?)",
                *overflow_uid_))));
    return;
  }
  std::shared_ptr<std::atomic<bool>> cancel = connection.TrackRequest(id);
  std::shared_ptr<ResponseSink> sink = connection.MakeSink(id, cancel);
  if (request.kind_case() == niels::v1::Request::kStats) {
    sink = std::make_shared<StatsSink>(std::move(sink), registry_);
  }
  Job job;
  job.caller.uid = connection.peer_uid();
  job.request = std::move(request);
  job.cancel = std::move(cancel);
  job.sink = std::move(sink);
  service_.Submit(std::move(job));
}

}  // namespace niels::daemon::server
