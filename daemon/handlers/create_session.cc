// CreateSession: a new session owned by the caller, with an optional system prompt.
#include <optional>
#include <string>

#include "daemon/engine/session_ops.h"
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleCreateSession(engine::EngineState& state, HandlerContext& context,
                                  const v1::CreateSessionRequest& request) {
  std::optional<std::string> system_prompt;
  if (request.has_system_prompt()) system_prompt = request.system_prompt();
  common::StatusOr<engine::Session*> created = engine::CreateSession(state, context.uid(), system_prompt);
  if (!created.ok()) return created.status();
  v1::Response response;
  response.mutable_create_session()->set_session_id((*created)->id());
  response.mutable_create_session()->set_length((*created)->length());
  return response;
}

}  // namespace niels::daemon::handlers
