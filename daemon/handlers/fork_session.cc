// ForkSession: a copy of one of the caller's sessions (history, turns and, when the KV budget
// allows, its cache), owned by the caller.
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleForkSession(engine::EngineState& state, server::Job& job,
                                const v1::ForkSessionRequest& request) {
  common::StatusOr<sessions::Session*> fork = state.sessions.Fork(request.session_id(), job.owner());
  if (!fork.ok()) return fork.status();
  v1::Response response;
  response.mutable_fork_session()->set_session_id((*fork)->id());
  response.mutable_fork_session()->set_length((*fork)->length());
  return response;
}

}  // namespace niels::daemon::handlers
