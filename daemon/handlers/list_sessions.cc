// ListSessions: the caller's own sessions (loaded and stored), oldest first.
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleListSessions(engine::EngineState& state, server::Job& job,
                                 const v1::ListSessionsRequest&) {
  v1::Response response;
  v1::ListSessionsResponse& result = *response.mutable_list_sessions();
  common::StatusOr<std::vector<sessions::SessionView>> sessions = state.sessions.List(job.owner());
  if (!sessions.ok()) return sessions.status();
  for (const sessions::SessionView& view : *sessions) FillSessionInfo(view, *result.add_sessions());
  return response;
}

}  // namespace niels::daemon::handlers
