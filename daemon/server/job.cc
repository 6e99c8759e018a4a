#include "daemon/server/job.h"

#include <utility>

#include "common/wire_status.h"

namespace niels::daemon::server {

bool Job::SendEvent(niels::v1::TokenEvent event) {
  if (sink_gone_ || answered_) return false;
  niels::v1::Response response;
  response.set_request_id(request_.request_id());
  *response.mutable_token() = std::move(event);
  if (!sink_->Send(std::move(response), /*final=*/false)) {
    sink_gone_ = true;
    cancel_->store(true);
  }
  return !sink_gone_;
}

void Job::Finish(niels::v1::Response response) {
  if (answered_) return;
  answered_ = true;
  response.set_request_id(request_.request_id());
  sink_->Send(std::move(response), /*final=*/true);
}

void Job::Fail(const common::Status& status) {
  niels::v1::Response response;
  *response.mutable_error() = common::ToProto(status);
  Finish(std::move(response));
}

}  // namespace niels::daemon::server
