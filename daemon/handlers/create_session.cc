// CreateSession: a new session owned by the caller, with an optional system prompt. With a system
// prompt (StartCreateSession) what the session starts with is prefilled by a turn of the scheduler
// (one of the caller's rows, in --prefill-chunk pieces between other sessions' steps) and the
// response goes out once it is cached; at once when there is nothing to prefill or no KV memory for
// it now. Without one, or with defer_prefill (HandleCreateSession, quick, when there are no tools
// to compile), nothing is prefilled. Whatever is not, the first request on the session prefills.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/engine/generate_turn.h"
#include "daemon/handlers/chat_messages.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"
#include "daemon/sessions/session_ops.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

namespace {

v1::Response CreatedResponse(const sessions::Session& session) {
  v1::Response response;
  response.mutable_create_session()->set_session_id(session.id());
  response.mutable_create_session()->set_length(session.length());
  return response;
}

// The new session (nothing prefilled yet), after the checks that need no encoding, with `tools`
// (checked and compiled by PrepareCreateSession).
common::StatusOr<sessions::Session*> NewSession(engine::EngineState& state, server::Job& job,
                                               const v1::CreateSessionRequest& request,
                                               std::shared_ptr<const std::vector<text::ToolDefinition>> tools = nullptr) {
  std::optional<std::string> system_prompt;
  if (request.has_system_prompt()) {
    if (request.system_prompt().size() > kMaxSystemPromptBytes) {
      return common::Refuse(common::BudgetId::kSystemPromptBytes,
                            fmt::format("system_prompt is {} bytes; the limit is {} bytes",
                                        request.system_prompt().size(), kMaxSystemPromptBytes));
    }
    system_prompt = request.system_prompt();
  }
  if ((system_prompt || tools != nullptr) && state.chat_format() == nullptr) return state.chat_format_status;
  if (tools != nullptr && !state.tool_call_family) {
    return common::Status::InvalidArgument(
        "tools: this model's chat format has no tool-call format nielsd knows (InfoResponse.tool_call_format is "
        "empty)");
  }
  common::StatusOr<sessions::CreatedSession> created =
      sessions::CreateSession(state.sessions, state.language_model(), state.chat_format(), job.owner(), system_prompt);
  if (!created.ok()) return created.status();
  if (tools != nullptr) {
    created->session->SetTools(std::move(tools));
    if (common::Status stored = state.sessions.Commit(*created->session); !stored.ok()) {
      (void)state.sessions.Delete(created->session->id(), job.owner());
      return stored;
    }
  }
  return created->session;
}

}  // namespace

HandlerResult HandleCreateSession(engine::EngineState& state, server::Job& job,
                                  const v1::CreateSessionRequest& request) {
  common::StatusOr<sessions::Session*> session = NewSession(state, job, request);
  if (!session.ok()) return session.status();
  return CreatedResponse(**session);
}

bool CreateSessionCompiles(const v1::CreateSessionRequest& request) { return request.tools().tools_size() > 0; }

common::StatusOr<Prepared> PrepareCreateSession(const v1::CreateSessionRequest& request, const PrepareContext& context,
                                                const CompileCancelled& cancelled) {
  Prepared prepared;
  common::StatusOr<std::shared_ptr<const std::vector<text::ToolDefinition>>> tools =
      ToolsFromProto(request.tools(), "tools", cancelled);
  if (!tools.ok()) return tools.status();
  prepared.tools = std::move(tools).value();
  NIELS_RETURN_IF_ERROR(CompileToolGrammars(context, cancelled, prepared));
  return prepared;
}

engine::TurnResult StartCreateSession(engine::EngineState& state, const engine::Work& work, server::Job& job,
                                      const v1::CreateSessionRequest& request, const Prepared& prepared) {
  // The grammars first: a set past the tool-grammar memory limits creates no session. (If the
  // session is then refused, the set dies with the request and its entry stops counting.)
  if (prepared.tools && *prepared.tools != nullptr) {
    const common::Status kept =
        state.tool_grammars.Remember(*prepared.tools, prepared.tool_grammars, prepared.tool_grammars_status, work.owner);
    if (!kept.ok()) return kept;
  }
  common::StatusOr<sessions::Session*> created = NewSession(state, job, request, prepared.tools.value_or(nullptr));
  if (!created.ok()) return created.status();
  sessions::Session& session = **created;
  if (session.length() == 0 || request.defer_prefill()) {
    job.Finish(CreatedResponse(session));
    return engine::TurnStart{};
  }
  // The prefill: a turn that only processes what the session holds (no input, no new tokens).
  engine::GenerateTurnArgs args;
  args.session_id = session.id();
  args.options.max_new_tokens = 0;
  engine::TurnCallbacks callbacks;
  callbacks.on_commit = [&job](const engine::TurnOutcome& outcome) { job.Finish(CreatedResponse(outcome.session)); };
  engine::TurnResult started = engine::StartGenerateTurn(state, work, std::move(args), std::move(callbacks));
  if (!started.ok() || started->wait_for_memory) {
    // No KV memory for it now (or ever, alone): the session is made; its first request prefills.
    job.Finish(CreatedResponse(session));
    return engine::TurnStart{};
  }
  started->turn->DeleteSessionUnlessCommitted();
  return started;
}

}  // namespace niels::daemon::handlers
