#include "daemon/sessions/session_ops.h"

#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>


namespace niels::daemon::sessions {

using common::Status;
using common::StatusOr;

namespace {

// Gives the new session's cache its system prompt: the blocks of an equal prompt that the pool
// holds already (prefix sharing), and a prefill of the rest when the KV pool has room (otherwise the
// first request on the session does it). Returns the positions prefilled.
int64_t PrefillSystemPrompt(const model::LanguageModel& model, Session& session) {
  const int64_t length = session.length();
  if (length == 0) return 0;
  model::Sequence& sequence = session.sequence();
  const int64_t reused = sequence.cache.AttachPrefix(sequence.tokens, length);
  if (reused == length) return 0;
  session.MarkBusy(0);  // not a victim of the blocks its own prefill takes
  int64_t prefilled = 0;
  try {
    model.Prefill(std::span<const int32_t>(sequence.tokens).subspan(reused), sequence.cache);
    prefilled = length - reused;
  } catch (const model::KvExhausted&) {
    // Every block is in use by running turns: the first request on the session prefills instead.
  }
  session.ClearBusy();
  return prefilled;
}

}  // namespace

StatusOr<CreatedSession> CreateSession(SessionRegistry& registry, const model::LanguageModel& model,
                                       const text::ChatFormat* format, uint32_t uid,
                                       const std::optional<std::string>& system_prompt) {
  std::vector<int32_t> system_ids;
  if (format == nullptr && system_prompt) {
    return Status::InvalidArgument("the model has no chat format, so a system prompt cannot be encoded");
  }
  // Without a system prompt the session stays empty: what a chat template writes before the first
  // user message (a BOS, a default system block) is rendered by the first Chat turn, and a raw
  // Generate conditions on nothing but the ids its caller sends.
  if (format != nullptr && system_prompt) {
    StatusOr<std::vector<int32_t>> encoded = format->SessionStart(system_prompt);
    if (!encoded.ok()) return encoded.status();
    system_ids = std::move(*encoded);
    const int64_t context = model.config().context;
    if (static_cast<int64_t>(system_ids.size()) >= context) {
      return Status::InvalidArgument(fmt::format(
          "the system prompt is {} tokens; it must be shorter than the model's context of {} tokens",
          system_ids.size(), context));
    }
  }
  StatusOr<Session*> created = registry.Create(uid, system_prompt, std::move(system_ids));
  if (!created.ok()) return created.status();
  CreatedSession result{*created, 0};
  if (result.session->length() > 0) {
    try {
      result.prefilled_tokens = PrefillSystemPrompt(model, *result.session);
    } catch (...) {
      (void)registry.Delete(result.session->id(), uid);
      throw;
    }
  }
  return result;
}

}  // namespace niels::daemon::sessions
