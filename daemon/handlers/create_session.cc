// CreateSession: a new session owned by the caller, with an optional system prompt.
#include <optional>
#include <string>

#include "daemon/sessions/session_ops.h"
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleCreateSession(engine::EngineState& state, server::Job& job,
                                  const v1::CreateSessionRequest& request) {
  std::optional<std::string> system_prompt;
  if (request.has_system_prompt()) system_prompt = request.system_prompt();
  if (system_prompt && state.chat_format() == nullptr) return state.chat_format_status;
  common::StatusOr<sessions::CreatedSession> created =
      sessions::CreateSession(state.sessions, state.language_model(), state.chat_format(), job.uid(), system_prompt);
  if (!created.ok()) return created.status();
  state.tokens_prefilled_total += static_cast<uint64_t>(created->prefilled_tokens);
  v1::Response response;
  response.mutable_create_session()->set_session_id(created->session->id());
  response.mutable_create_session()->set_length(created->session->length());
  return response;
}

}  // namespace niels::daemon::handlers
