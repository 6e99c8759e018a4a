#pragma once
// Conversations and tools in the protocol (proto/PROTOCOL.md, "Conversations" and "Tools"):
// ChatRequest.messages and ToolSets read into the engine's types and checked against their
// budgets, ToolChoice read, and messages written back (GetSession). Pure functions; any thread.
// Tools are compiled (each parameters schema through the JSON Schema compiler, as a constraint's
// schema is) on the compile worker, off the engine and IO threads (handlers.h: Prepare).

#include <memory>
#include <vector>

#include "common/status.h"
#include "daemon/engine/chat_tools.h"
#include "daemon/handlers/constraint.h"
#include "daemon/text/chat_format.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// The longest tool name and call id accepted.
inline constexpr size_t kMaxToolNameBytes = 64;
inline constexpr size_t kMaxToolCallIdBytes = 64;

// ChatRequest.messages: roles "user", "assistant" (with optional reasoning and tool calls, each
// with a non-empty id, a tool name and arguments that are a JSON object's text) and "tool" (with a
// non-empty tool_call_id and an optional name). "system" is refused: the system prompt is the
// session's (CreateSessionRequest.system_prompt). INVALID_ARGUMENT naming the field
// ("messages[2].role: ..."), budgets chat_messages, chat_message_bytes, tool_calls_per_reply.
// Whether a tool_call_id names a call of the conversation is the engine's check (it needs the
// session).
common::StatusOr<std::vector<text::ChatMessage>> MessagesFromProto(
    const google::protobuf::RepeatedPtrField<niels::v1::ChatMessage>& messages);

// A ToolSet (`field` names it in errors: "tools"): each name 1-64 of [A-Za-z0-9_-] and unique, each
// parameters "" or a JSON object that compiles as a JSON Schema constraint (within
// json_schema_bytes and the compile budgets); budgets tools and tool_bytes. An empty set is null
// (no tools). CANCELLED as CompileConstraint.
common::StatusOr<std::shared_ptr<const std::vector<text::ToolDefinition>>> ToolsFromProto(
    const niels::v1::ToolSet& tools, const char* field, const CompileCancelled& cancelled = {});

engine::ToolChoice ToolChoiceFromProto(const niels::v1::ToolChoice& choice);

// A conversation's message as GetSession and the clients see it.
void MessageToProto(const text::ChatMessage& message, niels::v1::ChatMessage& out);

}  // namespace niels::daemon::handlers
