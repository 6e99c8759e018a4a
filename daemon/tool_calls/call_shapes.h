#pragma once
// The JSON shapes of a completed call attempt, per family (tool_call_parser.h says which): the
// object's text in, the calls it holds out, or nothing when it is not a valid call.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/tool_calls/tool_call_parser.h"

namespace niels::daemon::tool_calls {

// `object`: the text of one JSON object, from its `{` to its `}`. Returns its calls (one for
// kHermes and kLlama3Json, one or more for kGenericJson) when it parses (ParseJsonBounded), has
// the family's keys exactly (unescaped, each once), every name is in `tool_names` (sorted) and
// every arguments value is an object; nullopt otherwise. The keys are looked at before the text
// is parsed, so most text that is no call is refused without a parse. Adds the bytes parsed and
// walked to `*work` (at most 4 * object.size()).
std::optional<std::vector<ToolCall>> CallsOfObject(ToolCallFamily family, std::string_view object,
                                                   const std::vector<std::string>& tool_names, uint64_t* work);

}  // namespace niels::daemon::tool_calls
