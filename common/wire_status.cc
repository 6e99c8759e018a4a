#include "common/wire_status.h"

#include <string>

namespace niels::common {

niels::v1::ErrorCode ToProtoCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return niels::v1::ERROR_CODE_UNSPECIFIED;
    case StatusCode::kInvalidArgument: return niels::v1::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return niels::v1::NOT_FOUND;
    case StatusCode::kPermissionDenied: return niels::v1::PERMISSION_DENIED;
    case StatusCode::kResourceExhausted: return niels::v1::RESOURCE_EXHAUSTED;
    case StatusCode::kCancelled: return niels::v1::CANCELLED;
    case StatusCode::kUnavailable: return niels::v1::UNAVAILABLE;
    case StatusCode::kUnimplemented: return niels::v1::UNIMPLEMENTED;
    case StatusCode::kInternal: return niels::v1::INTERNAL;
  }
  return niels::v1::INTERNAL;
}

niels::v1::Error ToProto(const Status& status) {
  niels::v1::Error error;
  error.set_code(ToProtoCode(status.code()));
  error.set_message(status.message());
  return error;
}

Status FromProto(const niels::v1::Error& error) {
  const std::string& m = error.message();
  switch (error.code()) {
    case niels::v1::INVALID_ARGUMENT: return Status::InvalidArgument(m);
    case niels::v1::NOT_FOUND: return Status::NotFound(m);
    case niels::v1::PERMISSION_DENIED: return Status::PermissionDenied(m);
    case niels::v1::RESOURCE_EXHAUSTED: return Status::ResourceExhausted(m);
    case niels::v1::CANCELLED: return Status::Cancelled(m);
    case niels::v1::UNAVAILABLE: return Status::Unavailable(m);
    case niels::v1::UNIMPLEMENTED: return Status::Unimplemented(m);
    case niels::v1::INTERNAL: return Status::Internal(m);
    default: break;  // ERROR_CODE_UNSPECIFIED or a code newer than this build
  }
  return Status::Internal("error with unknown code " + std::to_string(static_cast<int>(error.code())) +
                          (m.empty() ? std::string() : ": " + m));
}

}  // namespace niels::common
