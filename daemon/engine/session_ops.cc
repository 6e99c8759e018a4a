#include "daemon/engine/session_ops.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/engine/chat_template.h"

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// Prefills the system prompt into the new session's cache when the KV budget allows.
void PrefillSystemPrompt(EngineState& state, Session& session) {
  const int64_t length = session.length();
  if (length == 0 || !state.sessions.Reserve(&session, state.sessions.BytesForTokens(length)).ok()) return;
  Sequence& sequence = session.sequence();
  state.language_model().Prefill(sequence.tokens, sequence.cache);
  state.tokens_prefilled_total += static_cast<uint64_t>(length);
  state.sessions.Trim(&session);
}

}  // namespace

StatusOr<Session*> CreateSession(EngineState& state, uint32_t uid, const std::optional<std::string>& system_prompt) {
  std::vector<int32_t> system_ids;
  if (system_prompt) {
    system_ids = EncodeMessage(state.tokenizer(), Role::kSystem, *system_prompt);
    const int64_t context = state.config().context;
    if (static_cast<int64_t>(system_ids.size()) >= context) {
      return Status::InvalidArgument(fmt::format(
          "the system prompt is {} tokens; it must be shorter than the model's context of {} tokens",
          system_ids.size(), context));
    }
  }
  StatusOr<Session*> created = state.sessions.Create(uid);
  if (!created.ok()) return created.status();
  Session& session = **created;
  if (system_prompt) {
    session.SetSystemPrompt(std::move(system_ids));
    try {
      PrefillSystemPrompt(state, session);
    } catch (...) {
      state.sessions.Delete(session.id(), uid);
      throw;
    }
  }
  return &session;
}

}  // namespace niels::daemon::engine
