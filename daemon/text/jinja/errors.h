#pragma once
// JinjaError: how an error travels inside the jinja room (lexer, parser, evaluator, builtins).
//
// It is thrown where the problem is found and caught at the room's boundary (Template::Parse,
// Template::Render), which turns it into a common::Status whose message starts with the template
// position, "line:column: ". Nothing outside daemon/text/jinja ever sees the exception.

#include <string>
#include <utility>

#include "common/status.h"

namespace niels::daemon::text::jinja {

// A 1-based position in the template source (column counts code points).
struct SourcePos {
  int line = 0;
  int column = 0;
};

class JinjaError {
 public:
  enum class Kind {
    kSyntax,  // the template does not parse
    kRender,  // a type error, undefined value, raise_exception(...), unknown filter...
    kLimit,   // a resource limit of the render (depth, iterations, output size...)
  };

  JinjaError(Kind kind, std::string message, SourcePos pos = {})
      : kind_(kind), message_(std::move(message)), pos_(pos) {}

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const SourcePos& pos() const { return pos_; }
  // Sets the position if none was known yet (builtins throw without one; the evaluator adds the
  // position of the expression that called them).
  void SetPosIfUnknown(SourcePos pos) {
    if (pos_.line == 0) pos_ = pos;
  }

  // INVALID_ARGUMENT ("chat template syntax error at 3:14: ...", "chat template error at 3:14:
  // ...") or RESOURCE_EXHAUSTED for limits.
  common::Status ToStatus() const;

 private:
  Kind kind_;
  std::string message_;
  SourcePos pos_;
};

[[noreturn]] inline void ThrowRender(std::string message, SourcePos pos = {}) {
  throw JinjaError(JinjaError::Kind::kRender, std::move(message), pos);
}
[[noreturn]] inline void ThrowSyntax(std::string message, SourcePos pos) {
  throw JinjaError(JinjaError::Kind::kSyntax, std::move(message), pos);
}
[[noreturn]] inline void ThrowLimit(std::string message, SourcePos pos = {}) {
  throw JinjaError(JinjaError::Kind::kLimit, std::move(message), pos);
}

}  // namespace niels::daemon::text::jinja
