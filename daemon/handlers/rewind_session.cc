// RewindSession: the conversation after its first keep_messages messages is dropped (edit,
// regenerate or undo a turn). A token-native session keeps the tokens up to the end of its last
// kept turn; a template session keeps the tokens its history shares with the rendering of the kept
// conversation (what the next Chat turn would reuse anyway), so the cache stays valid either way.
#include <algorithm>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

HandlerResult HandleRewindSession(engine::EngineState& state, server::Job& job,
                                  const v1::RewindSessionRequest& request) {
  common::StatusOr<sessions::Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const size_t turns = session.turns().size() + session.messages().size() / 2;
  const int64_t keep_messages = request.keep_messages();
  if (keep_messages < 0 || keep_messages % 2 != 0 || static_cast<size_t>(keep_messages) > 2 * turns) {
    return Status::InvalidArgument(fmt::format(
        "keep_messages = {} must be even (whole turns: a user message and its reply) and in [0, {}]", keep_messages,
        2 * turns));
  }
  const size_t keep = static_cast<size_t>(keep_messages) / 2;
  int64_t length = session.length();
  if (keep < session.turns().size()) {
    length = keep == 0 ? session.system_end() : session.turns()[keep - 1].end;
  } else if (keep < session.messages().size() / 2 && state.chat_format() != nullptr) {
    // The tokens the history shares with the kept conversation followed by any next turn.
    std::optional<std::string> system;
    if (session.has_system_prompt()) system = session.system_prompt_text();
    const std::span<const text::ChatMessage> kept = std::span(session.messages()).first(2 * keep);
    common::StatusOr<text::ChatPrompt> rendered = state.chat_format()->EncodeTurn(system, kept, " ", {});
    if (!rendered.ok()) return rendered.status();
    const std::vector<int32_t>& tokens = session.tokens();
    const auto mismatch = std::mismatch(tokens.begin(), tokens.end(), rendered->ids.begin(), rendered->ids.end());
    length = std::max<int64_t>(session.system_end(), mismatch.first - tokens.begin());
  }
  NIELS_RETURN_IF_ERROR(state.sessions.Rewind(session, keep, length));  // durable: stored before the reply
  v1::Response response;
  response.mutable_rewind_session()->set_length(session.length());
  response.mutable_rewind_session()->set_messages(static_cast<int32_t>(2 * keep));
  return response;
}

}  // namespace niels::daemon::handlers
