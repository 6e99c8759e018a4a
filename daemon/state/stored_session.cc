#include "daemon/state/stored_session.h"

#include <fmt/format.h>

namespace niels::daemon::state {

std::string HistoryProblem(const StoredHistory& history) {
  const auto length = static_cast<int64_t>(history.tokens.size());
  if (history.system_end < 0 || history.system_end > length) {
    return fmt::format("system prompt end {} outside the {} tokens", history.system_end, length);
  }
  int64_t previous_end = history.system_end;
  for (size_t i = 0; i < history.turns.size(); ++i) {
    const TurnRange& turn = history.turns[i];
    if (turn.begin < previous_end || turn.end < turn.begin || turn.end > length) {
      return fmt::format("turn {} [{}, {}) overlaps or lies outside the {} tokens", i, turn.begin, turn.end, length);
    }
    previous_end = turn.end;
  }
  for (size_t i = 0; i < history.messages.size(); ++i) {
    const StoredMessage& message = history.messages[i];
    if (message.role != "user" && message.role != "assistant" && message.role != "tool") {
      return fmt::format("message {} has role \"{}\" (not user, assistant or tool)", i, message.role.substr(0, 32));
    }
    if (!message.tool_calls.empty() && message.role != "assistant") {
      return fmt::format("message {} of role {} has tool calls", i, message.role);
    }
    if ((message.role == "tool") != !message.tool_call_id.empty()) {
      return fmt::format("message {}: a tool call id belongs to each tool message and to no other", i);
    }
  }
  return "";
}

}  // namespace niels::daemon::state
