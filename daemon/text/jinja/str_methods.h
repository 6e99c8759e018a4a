#pragma once
// Python str methods for templates (str_methods.cc). Internal to daemon/text/jinja: templates reach
// them through CallMethod and GetAttr (builtins.h).

#include <string>
#include <string_view>

#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

class Evaluator;

bool IsStrMethod(std::string_view name);
// s.name(args). REQUIRES: IsStrMethod(name). Errors are JinjaError, as Python raises them.
Value StrMethod(Evaluator& ev, const std::string& s, const std::string& name, CallArgs& args);

}  // namespace niels::daemon::text::jinja
