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
    const char* expected = i % 2 == 0 ? "user" : "assistant";
    if (history.messages[i].role != expected) {
      return fmt::format("message {} has role \"{}\" where \"{}\" belongs", i, history.messages[i].role.substr(0, 32), expected);
    }
  }
  if (history.messages.size() % 2 != 0) return "the conversation ends without the assistant's reply";
  return "";
}

}  // namespace niels::daemon::state
