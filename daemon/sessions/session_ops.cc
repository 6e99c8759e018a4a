#include "daemon/sessions/session_ops.h"

#include <utility>
#include <vector>

#include <fmt/format.h>


namespace niels::daemon::sessions {

using common::Status;
using common::StatusOr;

StatusOr<CreatedSession> CreateSession(SessionRegistry& registry, const model::LanguageModel& model,
                                       const text::ChatFormat* format, common::OwnerId owner,
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
  StatusOr<Session*> created = registry.Create(owner, system_prompt, std::move(system_ids));
  if (!created.ok()) return created.status();
  return CreatedSession{*created};
}

}  // namespace niels::daemon::sessions
