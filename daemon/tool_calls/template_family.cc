#include "daemon/tool_calls/template_family.h"

namespace niels::daemon::tool_calls {

std::optional<ToolCallFamily> ToolCallFamilyOfTemplate(std::string_view chat_template) {
  if (chat_template.find("<tool_call>") != std::string_view::npos) return ToolCallFamily::kHermes;
  if (chat_template.find("<|python_tag|>") != std::string_view::npos ||
      chat_template.find("\"parameters\"") != std::string_view::npos) {
    return ToolCallFamily::kLlama3Json;
  }
  return std::nullopt;
}

}  // namespace niels::daemon::tool_calls
