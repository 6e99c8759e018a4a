#pragma once
// The builtins a template reaches: filters (`x | name`), tests (`x is name`), the methods of str,
// dict and list (`s.strip()`), attribute and item access with Jinja2's fallbacks, and the globals
// transformers' environment has (range, dict, namespace, raise_exception, strftime_now, ...).
//
// Each behaves as the Jinja2 3.1 builtin or the Python 3 method of the same name does, including
// the errors it raises; what is implemented is listed in filters.cc, tests.cc and methods.cc.
// Errors are JinjaError (errors.h). Stateless apart from the Evaluator passed in.

#include <string>
#include <string_view>

#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

class Evaluator;
class Frame;

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// input | name(args). REQUIRES: IsKnownFilter(name).
Value ApplyFilter(Evaluator& ev, std::string_view name, const Value& input, CallArgs& args);
// input is name(args). REQUIRES: IsKnownTest(name).
bool ApplyTest(Evaluator& ev, std::string_view name, const Value& input, CallArgs& args);

// obj.name as Jinja2's sandboxed getattr: a method bound to obj, else obj[name], else Undefined
// (mutating methods of lists and dicts give an Undefined that fails when called, as the immutable
// sandbox does). Throws when obj is Undefined.
Value GetAttr(Evaluator& ev, const Value& obj, const std::string& name);
// getattr(obj, name) without the item fallback (the attr filter): a dict's keys are not attributes.
Value GetAttrOnly(Evaluator& ev, const Value& obj, const std::string& name);
// obj[key] as Jinja2's getitem: item, else (for a str key) the attribute, else Undefined.
// Throws when obj is Undefined.
Value GetItem(Evaluator& ev, const Value& obj, const Value& key);
// obj[start:stop:step] on str, list and tuple (a bound may be None = absent); anything else is an
// error, as Python's slicing raises.
Value GetSlice(Evaluator& ev, const Value& obj, const Value& start, const Value& stop, const Value& step);

// obj.name(args) without materializing the bound method when obj has that method; otherwise
// calls GetAttr(obj, name).
Value CallMethod(Evaluator& ev, const Value& obj, const std::string& name, CallArgs& args);

// Registers the globals in `frame`: range, dict, namespace, raise_exception, strftime_now (which
// formats the Evaluator's fixed "now").
void AddGlobals(Frame& frame);

}  // namespace niels::daemon::text::jinja
