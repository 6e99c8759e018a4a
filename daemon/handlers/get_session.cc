// GetSession: one of the caller's sessions with its whole token history.
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleGetSession(engine::EngineState& state, server::Job& job,
                               const v1::GetSessionRequest& request) {
  common::StatusOr<sessions::Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  const sessions::Session& session = **found;
  v1::Response response;
  v1::GetSessionResponse& result = *response.mutable_get_session();
  FillSessionInfo(sessions::ViewOf(session), *result.mutable_session());
  result.mutable_token_ids()->Add(session.tokens().begin(), session.tokens().end());
  return response;
}

}  // namespace niels::daemon::handlers
