// CreateSession, GetSession, ListSessions, ForkSession, ResetSession, DeleteSession.
#include <fmt/format.h>

#include "daemon/engine/chat_template.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/proto_convert.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

// Prefills the system prompt into the new session's cache when the KV budget allows (otherwise the
// first request on the session prefills it).
void PrefillSystemPrompt(EngineState& state, Session& session) {
  const int64_t length = session.length();
  if (length == 0 || !state.sessions.Reserve(&session, state.sessions.BytesForTokens(length)).ok()) return;
  Sequence& sequence = session.sequence();
  state.language_model().Prefill(sequence.tokens, sequence.cache);
  state.tokens_prefilled_total += static_cast<uint64_t>(length);
  state.sessions.Trim(&session);
}

}  // namespace

HandlerResult HandleCreateSession(EngineState& state, JobContext& job, const v1::CreateSessionRequest& request) {
  std::vector<int32_t> system_ids;
  if (request.has_system_prompt()) {
    system_ids = EncodeMessage(state.tokenizer(), Role::kSystem, request.system_prompt());
    const int64_t context = state.config().context;
    if (static_cast<int64_t>(system_ids.size()) >= context) {
      return Status::InvalidArgument(fmt::format(
          "the system prompt is {} tokens; it must be shorter than the model's context of {} tokens",
          system_ids.size(), context));
    }
  }
  std::optional<std::string> system_text;
  if (request.has_system_prompt()) system_text = request.system_prompt();
  StatusOr<Session*> created = state.sessions.Create(job.uid(), system_text, std::move(system_ids));
  if (!created.ok()) return created.status();
  Session& session = **created;
  if (request.has_system_prompt()) {
    try {
      PrefillSystemPrompt(state, session);
    } catch (...) {
      state.sessions.Delete(session.id(), job.uid());
      throw;
    }
  }
  v1::Response response;
  response.mutable_create_session()->set_session_id(session.id());
  response.mutable_create_session()->set_length(session.length());
  return response;
}

HandlerResult HandleGetSession(EngineState& state, JobContext& job, const v1::GetSessionRequest& request) {
  StatusOr<Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  const Session& session = **found;
  v1::Response response;
  v1::GetSessionResponse& result = *response.mutable_get_session();
  FillSessionInfo(ViewOf(session), *result.mutable_session());
  result.mutable_token_ids()->Add(session.tokens().begin(), session.tokens().end());
  return response;
}

HandlerResult HandleListSessions(EngineState& state, JobContext& job, const v1::ListSessionsRequest& request) {
  v1::Response response;
  v1::ListSessionsResponse& result = *response.mutable_list_sessions();
  StatusOr<std::vector<SessionView>> sessions = state.sessions.List(job.uid());
  if (!sessions.ok()) return sessions.status();
  for (const SessionView& view : *sessions) FillSessionInfo(view, *result.add_sessions());
  return response;
}

HandlerResult HandleForkSession(EngineState& state, JobContext& job, const v1::ForkSessionRequest& request) {
  StatusOr<Session*> fork = state.sessions.Fork(request.session_id(), job.uid());
  if (!fork.ok()) return fork.status();
  v1::Response response;
  response.mutable_fork_session()->set_session_id((*fork)->id());
  response.mutable_fork_session()->set_length((*fork)->length());
  return response;
}

HandlerResult HandleResetSession(EngineState& state, JobContext& job, const v1::ResetSessionRequest& request) {
  StatusOr<Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  NIELS_RETURN_IF_ERROR(state.sessions.Reset(**found));
  v1::Response response;
  response.mutable_reset_session()->set_length((*found)->length());
  return response;
}

HandlerResult HandleDeleteSession(EngineState& state, JobContext& job, const v1::DeleteSessionRequest& request) {
  NIELS_RETURN_IF_ERROR(state.sessions.Delete(request.session_id(), job.uid()));
  v1::Response response;
  response.mutable_delete_session();
  return response;
}

}  // namespace niels::daemon::engine
