#pragma once
// What the session database keeps of one session (docs/ARCHITECTURE.md, "Durable sessions"): the
// rows SessionDb reads and writes, as plain values (no libtorch, no engine types).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/owner.h"

namespace niels::daemon::state {

// Half-open token range [begin, end) of a session's history: one completed chat turn.
struct TurnRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const TurnRange&) const = default;
};

// A call an assistant message made: its id, the tool's name, its arguments' JSON text.
struct StoredToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const StoredToolCall&) const = default;
};

// One message of a session's conversation (sessions of a model with a Jinja chat template): role
// "user", "assistant" or "tool", its text, an assistant reply's reasoning ("" when none) and tool
// calls, a tool result's call id and tool name.
struct StoredMessage {
  std::string role;
  std::string content;
  std::string reasoning;
  std::vector<StoredToolCall> tool_calls = {};
  std::string tool_call_id = {};
  std::string name = {};
  bool operator==(const StoredMessage&) const = default;
};

// A tool of the session: name, description, parameters (JSON Schema text; "" = any object).
struct StoredTool {
  std::string name;
  std::string description;
  std::string parameters;
  bool operator==(const StoredTool&) const = default;
};

// The history of a session: tokens [0, system_end) are its system prompt, `turns` its completed
// turns in order; tokens after the last turn (raw Generate) belong to no turn. A session of a
// model with a Jinja chat template keeps no turns but `messages`, its conversation after the system
// prompt (the tokens are what its KV cache was computed from: the last rendering and reply), and
// `tools`, the tools every rendering is given (empty: none).
struct StoredHistory {
  int64_t system_end = 0;
  std::vector<int32_t> tokens;
  std::vector<TurnRange> turns;
  std::vector<StoredMessage> messages;
  std::vector<StoredTool> tools = {};
  // Completed turns: token-native turns plus the conversation's assistant messages.
  int64_t turn_count() const {
    int64_t replies = 0;
    for (const StoredMessage& message : messages) replies += message.role == "assistant" ? 1 : 0;
    return static_cast<int64_t>(turns.size()) + replies;
  }
  bool operator==(const StoredHistory&) const = default;
};

// Everything about a session except its history; what ListSessions needs.
struct SessionSummary {
  std::string id;                            // 32 hex digits
  common::OwnerId owner = 0;                 // a uid or an API-key principal (common/owner.h)
  std::string model_fingerprint;             // ModelFingerprint of the model that wrote it
  std::string model_name;                    // that model's name, for listing
  std::optional<std::string> system_prompt;  // the text; nullopt = no system message
  int64_t length = 0;                        // tokens in the history
  int64_t turn_count = 0;                    // completed turns
  double created_unix_s = 0;
  double last_used_unix_s = 0;
  bool operator==(const SessionSummary&) const = default;
};

struct StoredSession {
  SessionSummary summary;
  StoredHistory history;
  bool operator==(const StoredSession&) const = default;
};

// OK-or-reason check of a history's internal consistency (ranges ordered, inside the tokens, after
// the system prompt; message roles "user", "assistant" or "tool", tool calls only on assistant
// messages, a call id on every tool message). Empty string when valid.
std::string HistoryProblem(const StoredHistory& history);

}  // namespace niels::daemon::state
