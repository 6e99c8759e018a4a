#include "daemon/text/chat_format.h"

#include "daemon/text/jinja_chat_format.h"
#include "daemon/text/native_chat_format.h"

namespace niels::daemon::text {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "user";  // unreachable: every Role is handled above
}

common::StatusOr<std::vector<int32_t>> ChatFormat::EncodeCompleted(const std::optional<std::string>&,
                                                                   std::span<const ChatMessage>,
                                                                   const ChatOptions&) const {
  return common::Status::Unimplemented(std::string(name()) + " chat format: replies are rendered its own way");
}

common::StatusOr<std::unique_ptr<ChatFormat>> MakeChatFormat(const ChatFormatSource& source) {
  if (source.tokenizer == nullptr) return common::Status::InvalidArgument("the model has no tokenizer");
  if (!source.chat_template.empty()) {
    common::StatusOr<std::unique_ptr<JinjaChatFormat>> format = JinjaChatFormat::Create(source);
    if (!format.ok()) return format.status();
    return std::unique_ptr<ChatFormat>(std::move(format).value());
  }
  common::StatusOr<std::unique_ptr<NativeChatFormat>> format = NativeChatFormat::Create(*source.tokenizer, source.special);
  if (!format.ok()) return format.status();
  return std::unique_ptr<ChatFormat>(std::move(format).value());
}

}  // namespace niels::daemon::text
