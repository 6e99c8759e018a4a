// ResetSession: back to the system prompt alone (same session id).
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleResetSession(engine::EngineState& state, server::Job& job,
                                 const v1::ResetSessionRequest& request) {
  common::StatusOr<sessions::Session*> found = state.sessions.Find(request.session_id(), job.owner());
  if (!found.ok()) return found.status();
  NIELS_RETURN_IF_ERROR(state.sessions.Reset(**found));  // durable: stored before the reply
  v1::Response response;
  response.mutable_reset_session()->set_length((*found)->length());
  return response;
}

}  // namespace niels::daemon::handlers
