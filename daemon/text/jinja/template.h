#pragma once
// Template: nielsd's Jinja renderer for chat templates.
//
// A model's chat template (tokenizer_config.json "chat_template", GGUF tokenizer.chat_template)
// renders exactly as Hugging Face transformers' apply_chat_template renders it with Python
// Jinja2: the environment is ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
// with the loopcontrols extension, transformers' tojson filter (ensure_ascii=False, keys in
// insertion order, indent), and the globals raise_exception(message) and strftime_now(format).
// Values follow Python: strings are indexed, sliced and measured by code point, floats print as
// Python's repr, dicts keep insertion order, undefined values behave as Jinja2's default
// Undefined. See daemon/text/jinja/README.md for the supported language and what is missing.
//
// A template is untrusted input: parsing bounds the source size and nesting depth, rendering the
// loop iterations, output size, macro recursion and total work (RenderLimits). Every failure is a
// Status, never a crash or an exception:
//   INVALID_ARGUMENT "chat template syntax error at LINE:COL: ..." (Parse), or
//   INVALID_ARGUMENT "chat template error at LINE:COL: ..." (Render: undefined values, type
//     errors, raise_exception(...) with its message, unknown filters or tests), or
//   RESOURCE_EXHAUSTED "chat template limit at LINE:COL: ..." (a limit was passed).
//
// Threading: a Template is immutable after Parse; any number of threads may Render it at once.
// Copies share the parsed tree.

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/text/jinja/render_limits.h"

namespace niels::daemon::text::jinja {

struct ParseOptions {
  bool trim_blocks = true;             // transformers' setting
  bool lstrip_blocks = true;           // transformers' setting
  size_t max_source_bytes = 1u << 20;  // real chat templates are under 20 KB
  int max_depth = 64;                  // nesting of blocks and expressions (real templates: under 10)
};

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now() formats (as UTC). Unset: the current time.
  std::optional<std::chrono::system_clock::time_point> now;
};

class Template {
 public:
  // INVALID_ARGUMENT on a syntax error (message with line:column), RESOURCE_EXHAUSTED when the
  // source or its nesting passes a ParseOptions bound.
  static common::StatusOr<Template> Parse(std::string_view source, const ParseOptions& options = {});

  // Renders with the keys of `context` (a JSON object) as template variables. Errors: see above;
  // also INVALID_ARGUMENT when `context` is not an object or holds invalid UTF-8.
  common::StatusOr<std::string> Render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

// What transformers passes to a chat template.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role":..,"content":..}, ...]
  nlohmann::ordered_json tools;  // a list of tool definitions, or null (transformers' tools=None)
  bool add_generation_prompt = false;
  // The tokenizer's special tokens; unset ones are not defined in the template (transformers
  // leaves out the ones that are None).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Further variables, e.g. Qwen3's {"enable_thinking": false}; they override the ones above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// The context transformers' apply_chat_template builds: messages, tools, documents (null),
// add_generation_prompt, the special tokens, then `extra`.
nlohmann::ordered_json BuildChatContext(const ChatTemplateInputs& inputs);

// chat_template.Render(BuildChatContext(inputs), options).
common::StatusOr<std::string> RenderChat(const Template& chat_template, const ChatTemplateInputs& inputs,
                                         const RenderOptions& options = {});

}  // namespace niels::daemon::text::jinja
