// DeleteSession: removes one of the caller's sessions and its cache.
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleDeleteSession(engine::EngineState& state, server::Job& job,
                                  const v1::DeleteSessionRequest& request) {
  NIELS_RETURN_IF_ERROR(state.sessions.Delete(request.session_id(), job.owner()));
  v1::Response response;
  response.mutable_delete_session();
  return response;
}

}  // namespace niels::daemon::handlers
