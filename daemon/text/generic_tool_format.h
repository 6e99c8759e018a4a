#pragma once
// The generic tool format: how a model whose chat template has no tool support (no `<tool_call>`,
// no Llama tool prompt: tool_calls/template_family.h) is given tools, shown its own calls and given
// their results, all as plain messages its template can render (proto/PROTOCOL.md, "Tools").
//
// GenericToolConversation rewrites a conversation before the template renders it:
//   - tools: a block describing them is added to the system prompt (after the caller's own system
//     prompt and a blank line, so that a long system prompt stays a cached prefix; alone when there
//     is none). It lists one tool per line as {"name", "description", "parameters"} (parameters as
//     the client sent them) and asks, in one line, for a reply that is either plain text or only
//     the object {"tool_calls": [{"name": "<n>", "arguments": <args>}, ...]} (short, for the small
//     contexts of niels_gpt models);
//   - an assistant message's tool calls become its content: that object, written exactly as the
//     tool-call grammar writes it (tool_grammar/tool_call_grammar.h, kGenericJson: one space after
//     ':' and ',', the arguments' text as it stands), after the message's own content and a newline
//     when it has some; so a reply the model made renders back as the text it sampled (but for
//     JSON whitespace it wrote after a call's arguments, which the parser does not keep);
//   - tool messages become one user message per run of consecutive ones, whose content is
//     {"tool_results": [{"name": "<tool>", "content": "<result>"}, ...]} in the order of the run
//     (a result without a name takes its call's, found by call id in the messages before it).
// Strings are written as JSON strings (UTF-8 kept, invalid bytes replaced by U+FFFD); nothing else
// changes. The result's size is the input's plus a constant per message and per tool: linear.
//
// GenericToolChatFormat is a ChatFormat that renders through another one after that rewrite, and
// gives the inner format no tools; everything else (stop ids, banned ids, reasoning, the session
// start) is the inner format's. Immutable; any thread.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/text/chat_format.h"

namespace niels::daemon::text {

struct RewrittenConversation {
  std::optional<std::string> system_prompt;
  std::vector<ChatMessage> messages;
};

// The system prompt and messages a template without tool support renders (see above). `tools`
// null or empty: no tool block (messages with calls or results are still rewritten).
RewrittenConversation GenericToolConversation(const std::optional<std::string>& system_prompt,
                                              std::span<const ChatMessage> conversation,
                                              const std::vector<ToolDefinition>* tools);

class GenericToolChatFormat final : public ChatFormat {
 public:
  explicit GenericToolChatFormat(std::unique_ptr<ChatFormat> inner) : inner_(std::move(inner)) {}

  Kind kind() const override { return inner_->kind(); }
  std::string_view name() const override { return inner_->name(); }
  common::StatusOr<std::vector<int32_t>> SessionStart(const std::optional<std::string>& system_prompt) const override {
    return inner_->SessionStart(system_prompt);
  }
  common::StatusOr<ChatPrompt> EncodeTurn(const std::optional<std::string>& system_prompt,
                                          std::span<const ChatMessage> conversation, std::string_view user_text,
                                          const ChatOptions& options) const override;
  common::StatusOr<ChatPrompt> EncodeConversation(const std::optional<std::string>& system_prompt,
                                                  std::span<const ChatMessage> conversation,
                                                  const ChatOptions& options) const override;
  const std::vector<int32_t>& stop_ids() const override { return inner_->stop_ids(); }
  const std::vector<int32_t>& banned_ids() const override { return inner_->banned_ids(); }
  const std::optional<ReasoningTags>& reasoning_tags() const override { return inner_->reasoning_tags(); }

 private:
  std::unique_ptr<ChatFormat> inner_;
};

}  // namespace niels::daemon::text
