#include "daemon/text/generic_tool_format.h"

#include <map>
#include <utility>

#include <nlohmann/json.hpp>

namespace niels::daemon::text {

namespace {

// `text` as a JSON string (UTF-8 kept; an invalid byte becomes U+FFFD).
std::string JsonString(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ToolBlock(const std::vector<ToolDefinition>& tools) {
  // Short: niels_gpt models have small contexts (the shipped one: 256 tokens, where these words
  // take 77 and a tool with one parameter some 85).
  std::string block = "# Tools\n";
  for (const ToolDefinition& tool : tools) {
    block += "{\"name\": " + JsonString(tool.name);
    if (!tool.description.empty()) block += ", \"description\": " + JsonString(tool.description);
    if (!tool.parameters.empty()) block += ", \"parameters\": " + tool.parameters;
    block += "}\n";
  }
  block += "To call tools, reply with only {\"tool_calls\": [{\"name\": \"<tool>\", \"arguments\": {...}}]}; otherwise answer in text.";
  return block;
}

// The object the tool-call grammar writes for these calls.
std::string CallsObject(const std::vector<ToolCall>& calls) {
  std::string text = "{\"tool_calls\": [";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) text += ", ";
    text += "{\"name\": " + JsonString(calls[i].name) + ", \"arguments\": " + calls[i].arguments + "}";
  }
  return text + "]}";
}

}  // namespace

RewrittenConversation GenericToolConversation(const std::optional<std::string>& system_prompt,
                                              std::span<const ChatMessage> conversation,
                                              const std::vector<ToolDefinition>* tools) {
  RewrittenConversation out;
  out.system_prompt = system_prompt;
  if (tools != nullptr && !tools->empty()) {
    std::string block = ToolBlock(*tools);
    out.system_prompt = system_prompt ? *system_prompt + "\n\n" + block : std::move(block);
  }
  std::map<std::string_view, std::string_view> call_names;  // call id -> tool name
  std::string results;  // the open run of tool results, without its closing "]}"
  const auto close_results = [&] {
    if (results.empty()) return;
    out.messages.push_back({Role::kUser, results + "]}", ""});
    results.clear();
  };
  for (const ChatMessage& message : conversation) {
    if (message.role == Role::kTool) {
      std::string_view name = message.name;
      if (name.empty()) {
        const auto found = call_names.find(message.tool_call_id);
        if (found != call_names.end()) name = found->second;
      }
      results += results.empty() ? "{\"tool_results\": [" : ", ";
      results += "{\"name\": " + JsonString(name) + ", \"content\": " + JsonString(message.content) + "}";
      continue;
    }
    close_results();
    ChatMessage rewritten = message;
    if (!message.tool_calls.empty()) {
      for (const ToolCall& call : message.tool_calls) call_names[call.id] = call.name;
      rewritten.content = (message.content.empty() ? "" : message.content + "\n") + CallsObject(message.tool_calls);
      rewritten.tool_calls.clear();
    }
    out.messages.push_back(std::move(rewritten));
  }
  close_results();
  return out;
}

common::StatusOr<ChatPrompt> GenericToolChatFormat::EncodeTurn(const std::optional<std::string>& system_prompt,
                                                               std::span<const ChatMessage> conversation,
                                                               std::string_view user_text,
                                                               const ChatOptions& options) const {
  const RewrittenConversation rewritten = GenericToolConversation(system_prompt, conversation, options.tools.get());
  ChatOptions inner_options = options;
  inner_options.tools = nullptr;
  return inner_->EncodeTurn(rewritten.system_prompt, rewritten.messages, user_text, inner_options);
}

common::StatusOr<ChatPrompt> GenericToolChatFormat::EncodeConversation(const std::optional<std::string>& system_prompt,
                                                                       std::span<const ChatMessage> conversation,
                                                                       const ChatOptions& options) const {
  const RewrittenConversation rewritten = GenericToolConversation(system_prompt, conversation, options.tools.get());
  ChatOptions inner_options = options;
  inner_options.tools = nullptr;
  return inner_->EncodeConversation(rewritten.system_prompt, rewritten.messages, inner_options);
}

}  // namespace niels::daemon::text
