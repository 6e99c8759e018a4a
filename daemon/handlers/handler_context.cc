#include "daemon/handlers/handler_context.h"

#include <utility>

#include "common/wire_status.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

void HandlerContext::SendEvent(v1::TokenEvent event) {
  if (sink_gone_ || answered_) return;
  v1::Response response;
  response.set_request_id(job_.request.request_id());
  *response.mutable_token() = std::move(event);
  if (!job_.sink->Send(std::move(response), /*final=*/false)) {
    sink_gone_ = true;
    job_.cancel->store(true);
  }
}

void HandlerContext::Finish(v1::Response response) {
  if (answered_) return;
  answered_ = true;
  response.set_request_id(job_.request.request_id());
  job_.sink->Send(std::move(response), /*final=*/true);
}

void HandlerContext::Fail(const common::Status& status) {
  v1::Response response;
  *response.mutable_error() = common::ToProto(status);
  Finish(std::move(response));
}

}  // namespace niels::daemon::handlers
