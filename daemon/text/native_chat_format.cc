#include "daemon/text/native_chat_format.h"

#include <utility>

namespace niels::daemon::text {

using common::Status;
using common::StatusOr;

NativeChatFormat::NativeChatFormat(const Tokenizer& tokenizer, const SpecialTokens& special)
    : tokenizer_(tokenizer), special_(special), stop_ids_{special.eot}, banned_ids_(DefaultBannedIds(special)) {}

StatusOr<std::unique_ptr<NativeChatFormat>> NativeChatFormat::Create(const Tokenizer& tokenizer,
                                                                     const SpecialTokens& special) {
  for (int32_t id : {special.sys, special.usr, special.asst, special.eot}) {
    if (id < 0 || id >= tokenizer.vocab_size()) {
      return Status::InvalidArgument("the model has no chat template: neither a Jinja chat template nor "
                                     "niels_gpt's four role markers; use Generate");
    }
  }
  return std::unique_ptr<NativeChatFormat>(new NativeChatFormat(tokenizer, special));
}

StatusOr<std::vector<int32_t>> NativeChatFormat::SessionStart(const std::optional<std::string>& system_prompt) const {
  if (!system_prompt) return std::vector<int32_t>();
  return EncodeMessage(tokenizer_, special_, Role::kSystem, *system_prompt);
}

StatusOr<ChatPrompt> NativeChatFormat::EncodeTurn(const std::optional<std::string>& /*system_prompt*/,
                                                  std::span<const ChatMessage> /*conversation*/,
                                                  std::string_view user_text, const ChatOptions& /*options*/) const {
  StatusOr<std::vector<int32_t>> encoded = EncodeMessage(tokenizer_, special_, Role::kUser, user_text);
  if (!encoded.ok()) return encoded.status();
  ChatPrompt prompt;
  prompt.ids = std::move(*encoded);
  const std::vector<int32_t> generation = GenerationPrompt(special_);
  prompt.ids.insert(prompt.ids.end(), generation.begin(), generation.end());
  return prompt;
}

StatusOr<ChatPrompt> NativeChatFormat::EncodeConversation(const std::optional<std::string>& system_prompt,
                                                          std::span<const ChatMessage> conversation,
                                                          const ChatOptions& options) const {
  if (options.tools != nullptr && !options.tools->empty()) {
    return common::Status::InvalidArgument("the token-native chat format has no way to give the model tools");
  }
  StatusOr<std::vector<int32_t>> start = SessionStart(system_prompt);
  if (!start.ok()) return start.status();
  ChatPrompt prompt;
  prompt.ids = std::move(*start);
  for (const ChatMessage& message : conversation) {
    if (message.role == Role::kSystem || !message.tool_calls.empty()) {
      return common::Status::InvalidArgument(
          "the token-native chat format takes user and assistant messages without tool calls only");
    }
    StatusOr<std::vector<int32_t>> encoded = EncodeMessage(tokenizer_, special_, message.role, message.content);
    if (!encoded.ok()) return encoded.status();
    prompt.ids.insert(prompt.ids.end(), encoded->begin(), encoded->end());
  }
  const std::vector<int32_t> generation = GenerationPrompt(special_);
  prompt.ids.insert(prompt.ids.end(), generation.begin(), generation.end());
  return prompt;
}

}  // namespace niels::daemon::text
