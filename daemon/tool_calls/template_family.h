#pragma once
// Which tool-call family a model's Jinja chat template speaks, read from the template's text
// (InfoResponse.tool_call_format names it):
//   - kHermes when the template writes `<tool_call>` (Qwen3, Qwen2.5 and other Hermes-style
//     templates);
//   - kLlama3Json when it writes `<|python_tag|>` or asks for `"parameters"` (Llama 3.1-3.3's JSON
//     tool prompt);
//   - none otherwise: a template without tool support, which the engine gives tools through the
//     generic tool format (kGenericJson, text/generic_tool_format.h).
// Pure; any thread.

#include <optional>
#include <string_view>

#include "daemon/tool_calls/tool_call_parser.h"

namespace niels::daemon::tool_calls {

std::optional<ToolCallFamily> ToolCallFamilyOfTemplate(std::string_view chat_template);

}  // namespace niels::daemon::tool_calls
