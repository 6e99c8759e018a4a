#include "daemon/engine/session_ops.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/engine/chat_template.h"

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// Gives the new session's cache its system prompt: the blocks of an equal prompt that the pool
// holds already (prefix sharing), and a prefill of the rest when the KV pool has room (otherwise the
// first request on the session does it).
void PrefillSystemPrompt(EngineState& state, Session& session) {
  const int64_t length = session.length();
  if (length == 0) return;
  Sequence& sequence = session.sequence();
  const int64_t reused = sequence.cache.AttachPrefix(sequence.tokens, length);
  if (reused == length) return;
  state.sessions.MarkBusy(&session, 0);  // not a victim of the blocks its own prefill takes
  try {
    state.language_model().Prefill(std::span<const int32_t>(sequence.tokens).subspan(reused), sequence.cache);
    state.tokens_prefilled_total += static_cast<uint64_t>(length - reused);
  } catch (const model::KvExhausted&) {
    // Every block is in use by running turns: the first request on the session prefills instead.
  }
  state.sessions.ClearBusy(&session);
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
  StatusOr<Session*> created = state.sessions.Create(uid, system_prompt, std::move(system_ids));
  if (!created.ok()) return created.status();
  Session& session = **created;
  if (system_prompt) {
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
