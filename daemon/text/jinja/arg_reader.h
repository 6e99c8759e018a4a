#pragma once
// ArgReader: binds a builtin's call arguments to its parameter names the way Python does
// (positional first, then keywords; too many, unknown or repeated ones are a TypeError).

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/value.h"

namespace niels::daemon::text::jinja {

class ArgReader {
 public:
  // `params` are the names after the input (for filters) or after self (for methods).
  ArgReader(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> params)
      : function_(function), params_(params), values_(params.size(), nullptr) {
    if (args.positional.size() > params_.size()) {
      ThrowRender(std::string(function) + "() takes at most " + std::to_string(params_.size()) + " argument(s) (" +
                  std::to_string(args.positional.size()) + " given)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = &args.positional[i];
    for (auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < params_.size() && params_[i] != key) ++i;
      if (i == params_.size()) {
        ThrowRender(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
      }
      if (values_[i] != nullptr) {
        ThrowRender(std::string(function) + "() got multiple values for argument '" + key + "'");
      }
      values_[i] = &value;
    }
  }

  // The i-th parameter, or nullptr when not given.
  const Value* Get(size_t i) const { return values_[i]; }
  bool Has(size_t i) const { return values_[i] != nullptr; }
  Value Or(size_t i, Value fallback) const { return values_[i] ? *values_[i] : std::move(fallback); }
  // The i-th parameter, required.
  const Value& Required(size_t i) const {
    if (values_[i] == nullptr) {
      ThrowRender(std::string(function_) + "() missing required argument '" + std::string(params_[i]) + "'");
    }
    return *values_[i];
  }
  // The i-th parameter as an int (bool counts), or `fallback` when absent; a TypeError otherwise.
  int64_t Int(size_t i, int64_t fallback) const {
    const Value* v = values_[i];
    if (v == nullptr) return fallback;
    if (v->is_int()) return v->as_int();
    if (v->is_bool()) return v->as_bool();
    ThrowRender("'" + v->TypeName() + "' object cannot be interpreted as an integer");
  }
  const std::string& String(size_t i) const {
    const Value& v = Required(i);
    if (!v.is_string()) ThrowRender(std::string(function_) + "() argument must be str, not " + v.TypeName());
    return v.as_string();
  }

 private:
  std::string_view function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> values_;
};

}  // namespace niels::daemon::text::jinja
