// RewindSession: the conversation after its first keep_messages messages is dropped (edit,
// regenerate or undo a turn). A token-native session keeps the tokens up to the end of its last
// kept turn; a template session (keep_messages any count of its messages) keeps the tokens its
// history shares with the rendering of the kept conversation (what the next Chat turn would reuse
// anyway), so the cache stays valid either way.
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
  common::StatusOr<sessions::Session*> found = state.sessions.Find(request.session_id(), job.owner());
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const int64_t keep_messages = request.keep_messages();
  size_t keep = 0;  // token-native: turns; template: messages
  int64_t length = session.length();
  if (session.messages().empty()) {
    const size_t turns = session.turns().size();
    if (keep_messages < 0 || keep_messages % 2 != 0 || static_cast<size_t>(keep_messages) > 2 * turns) {
      return Status::InvalidArgument(fmt::format(
          "keep_messages = {} must be even (whole turns: a user message and its reply) and in [0, {}]", keep_messages,
          2 * turns));
    }
    keep = static_cast<size_t>(keep_messages) / 2;
    if (keep < turns) length = keep == 0 ? session.system_end() : session.turns()[keep - 1].end;
  } else {
    if (keep_messages < 0 || static_cast<size_t>(keep_messages) > session.messages().size()) {
      return Status::InvalidArgument(fmt::format("keep_messages = {} must be in [0, {}]", keep_messages,
                                                 session.messages().size()));
    }
    keep = static_cast<size_t>(keep_messages);
    if (keep < session.messages().size() && state.conversation_format() != nullptr) {
      // The tokens the history shares with the rendering of the kept conversation followed by a
      // next user message or by a reply, whichever shares more (the next turn compares again).
      std::optional<std::string> system;
      if (session.has_system_prompt()) system = session.system_prompt_text();
      const std::span<const text::ChatMessage> kept = std::span(session.messages()).first(keep);
      text::ChatOptions options;
      options.tools = session.tools();
      common::StatusOr<text::ChatPrompt> user_next = state.conversation_format()->EncodeTurn(system, kept, " ", options);
      if (!user_next.ok()) return user_next.status();
      common::StatusOr<text::ChatPrompt> reply_next = state.conversation_format()->EncodeConversation(system, kept, options);
      if (!reply_next.ok()) return reply_next.status();
      const std::vector<int32_t>& tokens = session.tokens();
      int64_t shared = 0;
      for (const std::vector<int32_t>* ids : {&user_next->ids, &reply_next->ids}) {
        const auto mismatch = std::mismatch(tokens.begin(), tokens.end(), ids->begin(), ids->end());
        shared = std::max<int64_t>(shared, mismatch.first - tokens.begin());
      }
      length = std::max<int64_t>(session.system_end(), shared);
    }
  }
  NIELS_RETURN_IF_ERROR(state.sessions.Rewind(session, keep, length));  // durable: stored before the reply
  v1::Response response;
  response.mutable_rewind_session()->set_length(session.length());
  response.mutable_rewind_session()->set_messages(static_cast<int32_t>(session.messages().empty() ? 2 * keep : keep));
  return response;
}

}  // namespace niels::daemon::handlers
