#include "daemon/text/jinja/template.h"

#include <stdexcept>
#include <variant>

#include "daemon/text/jinja/ast.h"
#include "daemon/text/jinja/builtins.h"
#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/evaluator.h"
#include "daemon/text/jinja/lexer.h"
#include "daemon/text/jinja/parser.h"
#include "daemon/text/jinja/py_format.h"

namespace niels::daemon::text::jinja {

struct Template::Parsed {
  Body body;
  // The globals (range, namespace, ...): built once, only read by renders, shared by all of them.
  std::shared_ptr<Frame> globals;
};

common::Status JinjaError::ToStatus() const {
  const std::string where = pos_.line > 0 ? " at " + std::to_string(pos_.line) + ":" + std::to_string(pos_.column) : "";
  switch (kind_) {
    case Kind::kSyntax:
      return common::Status::InvalidArgument("chat template syntax error" + where + ": " + message_);
    case Kind::kRender:
      return common::Status::InvalidArgument("chat template error" + where + ": " + message_);
    case Kind::kLimit:
      return common::Status::ResourceExhausted("chat template limit" + where + ": " + message_);
  }
  return common::Status::Internal(message_);
}

common::StatusOr<Template> Template::Parse(std::string_view source, const ParseOptions& options) {
  if (source.size() > options.max_source_bytes) {
    return common::Status::ResourceExhausted("chat template limit: the template has " + std::to_string(source.size()) +
                                             " bytes, more than the limit of " +
                                             std::to_string(options.max_source_bytes));
  }
  try {
    LexerOptions lexer_options;
    lexer_options.trim_blocks = options.trim_blocks;
    lexer_options.lstrip_blocks = options.lstrip_blocks;
    const std::vector<Token> tokens = Tokenize(source, lexer_options);
    ParserOptions parser_options;
    parser_options.max_depth = options.max_depth;
    auto parsed = std::make_shared<Parsed>();
    parsed->body = jinja::Parse(tokens, parser_options);
    parsed->globals = std::make_shared<Frame>(nullptr);
    AddGlobals(*parsed->globals);
    return Template(std::move(parsed));
  } catch (const JinjaError& e) {
    return e.ToStatus();
  } catch (const std::logic_error& e) {  // a bug of ours (out_of_range, ...): an error, not a crash
    return common::Status::Internal(std::string("chat template: internal error: ") + e.what());
  }
}

common::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                               const RenderOptions& options) const {
  if (!context.is_object()) return common::Status::InvalidArgument("chat template context must be a JSON object");
  try {
    Evaluator ev(options.limits, options.now.value_or(std::chrono::system_clock::now()));
    auto top = std::make_shared<Frame>(parsed_->globals);
    for (const auto& [key, value] : context.items()) top->Set(key, FromJson(value, 64));
    std::string out;
    ev.Render(parsed_->body, top, out);
    return out;
  } catch (const JinjaError& e) {
    return e.ToStatus();
  } catch (const std::logic_error& e) {  // a bug of ours (out_of_range, ...): an error, not a crash
    return common::Status::Internal(std::string("chat template: internal error: ") + e.what());
  } catch (const std::bad_variant_access& e) {
    return common::Status::Internal(std::string("chat template: internal error: ") + e.what());
  }
}

nlohmann::ordered_json BuildChatContext(const ChatTemplateInputs& inputs) {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = inputs.messages;
  context["tools"] = inputs.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.bos_token) context["bos_token"] = *inputs.bos_token;
  if (inputs.eos_token) context["eos_token"] = *inputs.eos_token;
  if (inputs.extra.is_object()) {
    for (const auto& [key, value] : inputs.extra.items()) context[key] = value;
  }
  return context;
}

common::StatusOr<std::string> RenderChat(const Template& chat_template, const ChatTemplateInputs& inputs,
                                         const RenderOptions& options) {
  return chat_template.Render(BuildChatContext(inputs), options);
}

}  // namespace niels::daemon::text::jinja
