#include "daemon/handlers/chat_messages.h"

#include <set>
#include <string>

#include <fmt/format.h>

#include "common/bounded_json.h"
#include "common/budgets.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

// OK when `text` is a JSON object's text; INVALID_ARGUMENT naming `field` otherwise.
Status CheckJsonObject(const std::string& text, const std::string& field) {
  StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(text, field);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) return Status::InvalidArgument(field + ": not a JSON object");
  return Status::Ok();
}

Status CheckToolName(const std::string& name, const std::string& field) {
  if (name.empty() || name.size() > kMaxToolNameBytes) {
    return Status::InvalidArgument(fmt::format("{}: a tool name is 1 to {} bytes, not {}", field, kMaxToolNameBytes,
                                               name.size()));
  }
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!allowed) return Status::InvalidArgument(field + ": a tool name is made of A-Z, a-z, 0-9, '_' and '-'");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<text::ChatMessage>> MessagesFromProto(
    const google::protobuf::RepeatedPtrField<v1::ChatMessage>& messages) {
  if (static_cast<size_t>(messages.size()) > common::kChatMessagesLimit) {
    return common::Refuse(common::BudgetId::kChatMessages,
                          fmt::format("messages: {} messages (the limit is {})", messages.size(),
                                      common::kChatMessagesLimit));
  }
  size_t bytes = 0;
  for (const v1::ChatMessage& message : messages) {
    bytes += message.content().size() + message.reasoning().size() + message.tool_call_id().size() +
             message.name().size() + message.role().size();
    for (const v1::ToolCall& call : message.tool_calls()) {
      bytes += call.id().size() + call.name().size() + call.arguments().size();
    }
  }
  if (bytes > common::kChatMessageBytesLimit) {
    return common::Refuse(common::BudgetId::kChatMessageBytes,
                          fmt::format("messages: {} bytes of text (the limit is {} bytes)", bytes,
                                      common::kChatMessageBytesLimit));
  }
  std::vector<text::ChatMessage> out;
  out.reserve(static_cast<size_t>(messages.size()));
  for (int i = 0; i < messages.size(); ++i) {
    const v1::ChatMessage& message = messages[i];
    const std::string field = fmt::format("messages[{}]", i);
    text::ChatMessage converted;
    converted.content = message.content();
    if (message.role() == "user") {
      converted.role = text::Role::kUser;
    } else if (message.role() == "assistant") {
      converted.role = text::Role::kAssistant;
    } else if (message.role() == "tool") {
      converted.role = text::Role::kTool;
    } else if (message.role() == "system") {
      return Status::InvalidArgument(field +
                                     ".role: \"system\": the system prompt is the session's (CreateSessionRequest."
                                     "system_prompt), not a message");
    } else {
      return Status::InvalidArgument(field + ".role must be \"user\", \"assistant\" or \"tool\"");
    }
    if (converted.role != text::Role::kAssistant && (!message.reasoning().empty() || message.tool_calls_size() > 0)) {
      return Status::InvalidArgument(field + ": only an assistant message has reasoning or tool_calls");
    }
    if (converted.role != text::Role::kTool && (!message.tool_call_id().empty() || !message.name().empty())) {
      return Status::InvalidArgument(field + ": only a tool message has tool_call_id or name");
    }
    converted.reasoning = message.reasoning();
    if (static_cast<size_t>(message.tool_calls_size()) > common::kToolCallsPerReplyLimit) {
      return common::Refuse(common::BudgetId::kToolCallsPerReply,
                            fmt::format("{}.tool_calls: {} calls (the limit is {})", field, message.tool_calls_size(),
                                        common::kToolCallsPerReplyLimit));
    }
    for (int j = 0; j < message.tool_calls_size(); ++j) {
      const v1::ToolCall& call = message.tool_calls(j);
      const std::string call_field = fmt::format("{}.tool_calls[{}]", field, j);
      if (call.id().empty() || call.id().size() > kMaxToolCallIdBytes) {
        return Status::InvalidArgument(fmt::format("{}.id: a call id is 1 to {} bytes", call_field, kMaxToolCallIdBytes));
      }
      NIELS_RETURN_IF_ERROR(CheckToolName(call.name(), call_field + ".name"));
      NIELS_RETURN_IF_ERROR(CheckJsonObject(call.arguments(), call_field + ".arguments"));
      converted.tool_calls.push_back({call.id(), call.name(), call.arguments()});
    }
    if (converted.role == text::Role::kTool) {
      if (message.tool_call_id().empty() || message.tool_call_id().size() > kMaxToolCallIdBytes) {
        return Status::InvalidArgument(
            fmt::format("{}.tool_call_id: a tool result names its call, an id of 1 to {} bytes", field,
                        kMaxToolCallIdBytes));
      }
      if (!message.name().empty()) NIELS_RETURN_IF_ERROR(CheckToolName(message.name(), field + ".name"));
      converted.tool_call_id = message.tool_call_id();
      converted.name = message.name();
    }
    out.push_back(std::move(converted));
  }
  return out;
}

StatusOr<std::shared_ptr<const std::vector<text::ToolDefinition>>> ToolsFromProto(const v1::ToolSet& tools,
                                                                                 const char* field,
                                                                                 const CompileCancelled& cancelled) {
  if (static_cast<size_t>(tools.tools_size()) > common::kToolsLimit) {
    return common::Refuse(common::BudgetId::kTools, fmt::format("{}: {} tools (the limit is {})", field,
                                                                tools.tools_size(), common::kToolsLimit));
  }
  size_t bytes = 0;
  for (const v1::Tool& tool : tools.tools()) bytes += tool.name().size() + tool.description().size() + tool.parameters().size();
  if (bytes > common::kToolBytesLimit) {
    return common::Refuse(common::BudgetId::kToolBytes, fmt::format("{}: {} bytes of text (the limit is {} bytes)",
                                                                    field, bytes, common::kToolBytesLimit));
  }
  if (tools.tools_size() == 0) return std::shared_ptr<const std::vector<text::ToolDefinition>>();
  auto out = std::make_shared<std::vector<text::ToolDefinition>>();
  std::set<std::string> names;
  for (int i = 0; i < tools.tools_size(); ++i) {
    const v1::Tool& tool = tools.tools(i);
    const std::string tool_field = fmt::format("{}[{}]", field, i);
    NIELS_RETURN_IF_ERROR(CheckToolName(tool.name(), tool_field + ".name"));
    if (!names.insert(tool.name()).second) {
      return Status::InvalidArgument(fmt::format("{}.name: \"{}\" is the name of an earlier tool", tool_field, tool.name()));
    }
    if (!tool.parameters().empty()) {
      const std::string parameters_field = tool_field + ".parameters";
      if (tool.parameters().size() > common::kJsonSchemaBytesLimit) {
        return common::Refuse(common::BudgetId::kJsonSchemaBytes,
                              fmt::format("{}: too large: {} bytes (the limit is {} bytes)", parameters_field,
                                          tool.parameters().size(), common::kJsonSchemaBytesLimit));
      }
      NIELS_RETURN_IF_ERROR(CheckJsonObject(tool.parameters(), parameters_field));
      if (cancelled && cancelled()) return Status::Cancelled("the request was cancelled");
      grammar::GrammarLimits limits;
      limits.cancelled = cancelled;
      StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
          grammar::CompileJsonSchema(tool.parameters(), limits);
      if (!compiled.ok()) {
        if (compiled.status().code() == common::StatusCode::kCancelled) return compiled.status();
        return Status(compiled.status().code(), parameters_field + ": " + compiled.status().message());
      }
    }
    out->push_back({tool.name(), tool.description(), tool.parameters()});
  }
  return std::shared_ptr<const std::vector<text::ToolDefinition>>(std::move(out));
}

engine::ToolChoice ToolChoiceFromProto(const v1::ToolChoice& choice) {
  engine::ToolChoice out;
  switch (choice.mode()) {
    case v1::ToolChoice::NONE:
      out.mode = engine::ToolChoice::Mode::kNone;
      break;
    case v1::ToolChoice::REQUIRED:
      out.mode = engine::ToolChoice::Mode::kRequired;
      break;
    case v1::ToolChoice::NAMED:
      out.mode = engine::ToolChoice::Mode::kNamed;
      out.name = choice.name();
      break;
    default:
      out.mode = engine::ToolChoice::Mode::kAuto;
      break;
  }
  return out;
}

void MessageToProto(const text::ChatMessage& message, v1::ChatMessage& out) {
  out.set_role(std::string(text::RoleName(message.role)));
  out.set_content(message.content);
  out.set_reasoning(message.reasoning);
  for (const text::ToolCall& call : message.tool_calls) {
    v1::ToolCall& converted = *out.add_tool_calls();
    converted.set_id(call.id);
    converted.set_name(call.name);
    converted.set_arguments(call.arguments);
  }
  out.set_tool_call_id(message.tool_call_id);
  out.set_name(message.name);
}

Status CompileToolGrammars(const PrepareContext& context, const CompileCancelled& cancelled, Prepared& prepared) {
  if (!prepared.tools || *prepared.tools == nullptr || !context.tool_call_family) return Status();
  tool_grammar::ToolGrammarOptions options;
  options.limits = ConstraintGrammarLimits();
  options.limits.cancelled = cancelled;
  options.max_calls = engine::kMaxToolCallsPerReply;
  if (context.reasoning) options.reasoning = tool_grammar::ReasoningTags{context.reasoning->open, context.reasoning->close};
  StatusOr<std::shared_ptr<const tool_grammar::ToolChoiceGrammars>> grammars =
      tool_grammar::CompileToolChoiceGrammars(**prepared.tools, *context.tool_call_family, options);
  if (grammars.ok()) {
    prepared.tool_grammars = std::move(grammars).value();
    return Status();
  }
  if (grammars.status().code() != common::StatusCode::kInvalidArgument) return grammars.status();
  prepared.tool_grammars_status = grammars.status();
  return Status();
}

}  // namespace niels::daemon::handlers
