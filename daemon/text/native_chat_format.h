#pragma once
// NativeChatFormat: niels_gpt's token-native chat template (chat_template.h) behind the ChatFormat
// interface. A turn appends [usr] text [eot] [asst]; a system prompt is [sys] text [eot]; replies
// stop at eot; sys, usr and asst are banned; user text containing a special-token literal is
// encoded as plain text; replies carry no reasoning.

#include <memory>

#include "daemon/text/chat_format.h"

namespace niels::daemon::text {

class NativeChatFormat final : public ChatFormat {
 public:
  // INVALID_ARGUMENT when one of the four markers is missing (-1).
  static common::StatusOr<std::unique_ptr<NativeChatFormat>> Create(const Tokenizer& tokenizer,
                                                                    const SpecialTokens& special);

  Kind kind() const override { return Kind::kTokenNative; }
  std::string_view name() const override { return "niels"; }
  common::StatusOr<std::vector<int32_t>> SessionStart(const std::optional<std::string>& system_prompt) const override;
  common::StatusOr<ChatPrompt> EncodeTurn(const std::optional<std::string>& system_prompt,
                                          std::span<const ChatMessage> conversation, std::string_view user_text,
                                          const ChatOptions& options) const override;
  common::StatusOr<ChatPrompt> EncodeConversation(const std::optional<std::string>& system_prompt,
                                                  std::span<const ChatMessage> conversation,
                                                  const ChatOptions& options) const override;
  const std::vector<int32_t>& stop_ids() const override { return stop_ids_; }
  const std::vector<int32_t>& banned_ids() const override { return banned_ids_; }
  const std::optional<ReasoningTags>& reasoning_tags() const override { return no_tags_; }

 private:
  NativeChatFormat(const Tokenizer& tokenizer, const SpecialTokens& special);

  const Tokenizer& tokenizer_;
  SpecialTokens special_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> banned_ids_;
  std::optional<ReasoningTags> no_tags_;
};

}  // namespace niels::daemon::text
