// Fuzz target: chat templates (daemon/text/jinja/template.h): lexer, parser and renderer.
//
// Input: the template's source. It is parsed and, when it parses, rendered twice with a fixed
// context of the kind transformers passes (messages with system/user/assistant/tool turns, unicode,
// reasoning_content, tool calls, tools, add_generation_prompt, special tokens, enable_thinking) and
// a fixed "now", under small limits so that a hostile template stops quickly.
// Invariants: every failure is INVALID_ARGUMENT or RESOURCE_EXHAUSTED with a message; a render that
// succeeds is valid UTF-8 within the output limit, and rendering again gives the same bytes.
#include <string>
#include <string_view>

#include "daemon/text/jinja/py_text.h"
#include "daemon/text/jinja/template.h"
#include "tests/fuzz/fuzz_util.h"

namespace jinja = niels::daemon::text::jinja;
using niels::common::StatusCode;

namespace {

const nlohmann::ordered_json& Context() {
  static const auto* context = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief. 你好 😀"},
      {"role": "user", "content": "  What is 2+2? {{ x }} <|im_end|>\n"},
      {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4", "reasoning_content": "sum"},
      {"role": "user", "content": "call a tool"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"expr": "2+2", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"result\": 4}"},
      {"role": "user", "content": "e\u0301\u3000\u00a0end"}
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "Evaluate",
               "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|eot_id|>",
    "enable_thinking": false,
    "n": 3, "f": 0.5, "s": "abc"
  })"));
  return *context;
}

jinja::RenderOptions Options() {
  jinja::RenderOptions o;
  o.limits.max_output_bytes = 64 << 10;
  o.limits.max_list_items = 4096;
  o.limits.max_loop_iterations = 4096;
  o.limits.max_call_depth = 16;
  o.limits.max_work = 2'000'000;
  o.now = std::chrono::system_clock::time_point(std::chrono::seconds(1795000000));
  return o;
}

void CheckFailure(const niels::common::Status& s) {
  FUZZ_CHECK(!s.ok());
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kResourceExhausted);
  FUZZ_CHECK(!s.message().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  jinja::ParseOptions parse_options;
  parse_options.max_source_bytes = 64 << 10;
  auto parsed = jinja::Template::Parse(source, parse_options);
  if (!parsed.ok()) {
    CheckFailure(parsed.status());
    return 0;
  }
  const jinja::RenderOptions options = Options();
  auto first = parsed->Render(Context(), options);
  auto second = parsed->Render(Context(), options);
  FUZZ_CHECK(first.ok() == second.ok());
  if (!first.ok()) {
    CheckFailure(first.status());
    FUZZ_CHECK(first.status() == second.status());
    return 0;
  }
  FUZZ_CHECK(*first == *second);
  FUZZ_CHECK(first->size() <= options.limits.max_output_bytes);
  FUZZ_CHECK(jinja::IsValidUtf8(*first));
  return 0;
}
