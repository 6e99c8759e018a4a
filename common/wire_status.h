#pragma once
// The one place where common::Status crosses the wire (niels.v1.Error), in each direction:
// the daemon's dispatcher calls ToProto, the client calls FromProto. Nothing else converts codes.
//
// Pure functions; thread-safe.

#include "common/status.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::common {

// Non-OK status -> Error with the matching code and the same message.
// An OK status (which should never be sent as an error) gives ERROR_CODE_UNSPECIFIED, "".
niels::v1::Error ToProto(const Status& status);

// Error -> Status with the matching code and the same message. ERROR_CODE_UNSPECIFIED or a
// code this build does not know (a newer daemon) gives INTERNAL, naming the numeric code;
// the result is never OK.
Status FromProto(const niels::v1::Error& error);

// The wire code for a StatusCode (kOk -> ERROR_CODE_UNSPECIFIED).
niels::v1::ErrorCode ToProtoCode(StatusCode code);

}  // namespace niels::common
