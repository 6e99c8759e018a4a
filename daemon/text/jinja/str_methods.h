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

// Python's printf-style `format % args`: %s %r %a %d %i %u %f %F %e %E %g %G %x %X %o %c %% with
// flags (-+ 0#), width and precision (not `*`), %(name)s keys with a dict; `args` is a tuple, a
// dict, or one value. Errors as Python's (not enough arguments, not all converted, bad types).
Value PercentFormat(Evaluator& ev, const std::string& format, const Value& args);

}  // namespace niels::daemon::text::jinja
