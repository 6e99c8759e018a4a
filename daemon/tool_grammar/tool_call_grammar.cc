#include "daemon/tool_grammar/tool_call_grammar.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <set>
#include <unordered_set>
#include <vector>

#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/matcher.h"
#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::tool_grammar {
namespace {

using common::Status;
using tool_calls::ToolCallFamily;

// A code point as a GBNF escape (inside a literal or a class).
std::string Escape(uint32_t cp) {
  if (cp < 0x80 && std::isalnum(static_cast<int>(cp))) return std::string(1, static_cast<char>(cp));
  if (cp == ' ') return " ";
  if (cp < 0x100) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x10000) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::vector<uint32_t> CodePoints(std::string_view text) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  uint32_t cp = 0;
  while (pos < text.size() && grammar::DecodeUtf8(text, &pos, &cp)) out.push_back(cp);
  return out;
}

// A GBNF literal of `text` (valid UTF-8).
std::string Literal(std::string_view text) {
  std::string out = "\"";
  for (uint32_t cp : CodePoints(text)) {
    if (cp >= 0x80) {
      grammar::AppendUtf8(cp, &out);
    } else {
      out += Escape(cp);
    }
  }
  return out + "\"";
}

// `gbnf` (written by the schema compiler) with every rule name prefixed: names are the runs of
// [a-zA-Z0-9-] outside literals, classes, repetition counts and comments.
std::string PrefixRuleNames(std::string_view gbnf, std::string_view prefix) {
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      const size_t start = i++;
      while (i < gbnf.size() && gbnf[i] != close) i += gbnf[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, gbnf.size());
      out.append(gbnf.substr(start, i - start));
    } else if (c == '{') {
      const size_t end = gbnf.find('}', i);
      const size_t stop = end == std::string_view::npos ? gbnf.size() : end + 1;
      out.append(gbnf.substr(i, stop - i));
      i = stop;
    } else if (c == '#') {
      const size_t end = gbnf.find('\n', i);
      const size_t stop = end == std::string_view::npos ? gbnf.size() : end;
      out.append(gbnf.substr(i, stop - i));
      i = stop;
    } else if (is_name(c)) {
      const size_t start = i;
      while (i < gbnf.size() && is_name(gbnf[i])) ++i;
      out.append(prefix);
      out.append(gbnf.substr(start, i - start));
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// Rules `name-0` .. `name-(L-1)` for text that does not contain `trigger` (L code points) except,
// when `then` is not empty, as its end: the trigger's last character continues with the GBNF
// sequence `then`. `may_end`: the text may end in any state (else only through `then`). State k =
// how much of the trigger the text ends with (KMP).
std::string AvoidingRules(const std::string& name, std::string_view trigger, const std::string& then, bool may_end) {
  const std::vector<uint32_t> t = CodePoints(trigger);
  const size_t n = t.size();
  std::vector<size_t> fail(n, 0);  // longest proper border of t[0..k]
  for (size_t k = 1, b = 0; k < n; ++k) {
    while (b > 0 && t[k] != t[b]) b = fail[b - 1];
    if (t[k] == t[b]) ++b;
    fail[k] = b;
  }
  auto next = [&](size_t k, uint32_t c) {
    while (true) {
      if (t[k] == c) return k + 1;
      if (k == 0) return size_t{0};
      k = fail[k - 1];
    }
  };
  const std::set<uint32_t> chars(t.begin(), t.end());
  std::string other = "[^";
  for (uint32_t c : chars) other += Escape(c);
  other += "]";
  std::string out;
  for (size_t k = 0; k < n; ++k) {
    std::vector<std::string> alts;
    for (uint32_t c : chars) {
      const size_t to = next(k, c);
      const std::string lit = fmt::format("\"{}\"", Escape(c));
      if (to == n) {
        if (!then.empty()) alts.push_back(lit + " " + then);
      } else {
        alts.push_back(lit + " " + name + "-" + std::to_string(to));
      }
    }
    alts.push_back(other + " " + name + "-0");
    std::string body;
    for (size_t a = 0; a < alts.size(); ++a) body += (a ? " | " : "") + alts[a];
    out += fmt::format("{}-{} ::= ({}){}\n", name, k, body, may_end ? "?" : "");
  }
  return out;
}

Status CheckName(const std::string& name, size_t i) {
  if (name.empty()) return Status::InvalidArgument(fmt::format("tools[{}].name: empty", i));
  size_t pos = 0;
  uint32_t cp = 0;
  while (pos < name.size()) {
    if (!grammar::DecodeUtf8(name, &pos, &cp)) {
      return Status::InvalidArgument(fmt::format("tools[{}].name: not valid UTF-8", i));
    }
    if (cp < 0x20 || cp == '"' || cp == '\\') {
      return Status::InvalidArgument(fmt::format(
          "tools[{}].name: '{}' cannot be written as a JSON string without escapes (a '\"', '\\\\' or control character)",
          i, name));
    }
  }
  return Status::Ok();
}

// The schema grammar of tool i, its rules prefixed "t<i>-" (root: "t<i>-root"), after checking that
// every value it allows is an object.
common::StatusOr<std::string> ArgumentRules(const text::ToolDefinition& tool, size_t i, const grammar::GrammarLimits& limits) {
  const std::string schema = tool.parameters.empty() ? std::string(R"({"type":"object"})") : tool.parameters;
  auto gbnf = grammar::JsonSchemaToGbnf(schema, limits);
  if (!gbnf.ok()) return Status(gbnf.status().code(), fmt::format("tools[{}].parameters: {}", i, gbnf.status().message()));
  auto compiled = grammar::CompiledGrammar::FromGbnf(*gbnf, limits);
  if (!compiled.ok()) {
    return Status(compiled.status().code(), fmt::format("tools[{}].parameters: {}", i, compiled.status().message()));
  }
  grammar::Matcher m(*compiled);
  const std::bitset<256> first = m.AllowedBytes();
  if (first.count() != 1 || !first.test('{')) {
    return Status::InvalidArgument(fmt::format(
        "tools[{}].parameters: the schema allows values that are not JSON objects (a tool's arguments are an object)", i));
  }
  // Every number must fit a double (the parser reads arguments with nlohmann-json, which refuses
  // one that does not): at most two exponent digits, with the at most 16 + 16 digits before them.
  std::string text = std::move(gbnf).value();
  const std::string_view exponent = "([eE] [-+]? integral-part)?";
  for (size_t at = text.find(exponent); at != std::string::npos; at = text.find(exponent, at)) {
    text.replace(at, exponent.size(), "([eE] [-+]? [0-9]{1,2})?");
  }
  return PrefixRuleNames(text, fmt::format("t{}-", i));
}

}  // namespace

common::StatusOr<std::string> ToolCallGbnf(std::span<const text::ToolDefinition> tools, ToolCallFamily family,
                                           const ToolChoice& choice, const ToolGrammarOptions& options) {
  if (tools.empty()) return Status::InvalidArgument("tools: no tools to call");
  if (options.max_calls == 0) return Status::InvalidArgument("max_calls: 0 (at least one call)");
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    NIELS_RETURN_IF_ERROR(CheckName(tools[i].name, i));
    if (!names.insert(tools[i].name).second) {
      return Status::InvalidArgument(fmt::format("tools[{}].name: '{}' is given twice", i, tools[i].name));
    }
  }
  if (choice.mode == ToolChoiceMode::kNamed && names.count(choice.name) == 0) {
    return Status::InvalidArgument(fmt::format("tool_choice.name: '{}' is none of the tools", choice.name));
  }
  if (options.reasoning && (options.reasoning->open.empty() || options.reasoning->close.empty())) {
    return Status::InvalidArgument("reasoning: empty tag");
  }

  std::string out;
  const char* args_key = family == ToolCallFamily::kLlama3Json ? "parameters" : "arguments";
  // One alternative per callable tool: {"name": "<n>", "<key>": <args>}.
  std::string call_body;
  for (size_t i = 0; i < tools.size(); ++i) {
    auto rules = ArgumentRules(tools[i], i, options.limits);
    if (!rules.ok()) return rules.status();
    out += *rules;
    if (choice.mode == ToolChoiceMode::kNamed && tools[i].name != choice.name) continue;
    out += fmt::format("call-{} ::= {} t{}-root \"}}\"\n", i,
                       Literal(fmt::format("{{\"name\": \"{}\", \"{}\": ", tools[i].name, args_key)), i);
    call_body += (call_body.empty() ? "" : " | ") + fmt::format("call-{}", i);
  }
  out += "call-body ::= " + call_body + "\n";
  out += "jws ::= [ \\t\\n\\r]*\n";
  const std::string more = options.max_calls > 1 ? fmt::format("{{0,{}}}", options.max_calls - 1) : "{0}";
  // The calls, from the first byte of a call to the end of the last.
  std::string calls;
  switch (family) {
    case ToolCallFamily::kHermes:
      out += "hermes-call ::= \"<tool_call>\\n\" call-body \"\\n</tool_call>\"\n";
      calls = options.max_calls > 1 ? fmt::format("hermes-call (\"\\n\" hermes-call){}", more) : "hermes-call";
      break;
    case ToolCallFamily::kLlama3Json:
      calls = "call-body";
      break;
    case ToolCallFamily::kGenericJson:
      calls = options.max_calls > 1 ? fmt::format("\"{{\\\"tool_calls\\\": [\" call-body (\", \" call-body){} \"]}}\"", more)
                                    : "\"{\\\"tool_calls\\\": [\" call-body \"]}\"";
      break;
  }
  // The reply after any reasoning.
  std::string answer;
  if (choice.mode != ToolChoiceMode::kAuto) {
    answer = calls;
  } else if (family == ToolCallFamily::kHermes) {
    // free-m: free text after m calls; `<tool_call>` in it opens call m + 1 (none after max_calls).
    for (size_t m = 0; m <= options.max_calls; ++m) {
      const std::string then =
          m < options.max_calls ? fmt::format("\"\\n\" call-body \"\\n</tool_call>\" free{}-0", m + 1) : "";
      out += AvoidingRules(fmt::format("free{}", m), "<tool_call>", then, /*may_end=*/true);
    }
    answer = "free0-0";
  } else {
    // The first character after JSON whitespace decides: `{` opens the call, anything else is text.
    answer = "jws (" + calls + " | [^{ \\t\\n\\r] .*)?";
  }
  if (options.reasoning) {
    out += AvoidingRules("think", options.reasoning->close, "jws reply", /*may_end=*/false);
    out += "reply ::= " + answer + "\n";
    out += "root ::= " + Literal(options.reasoning->open) + " think-0 | reply\n";
  } else {
    out += "root ::= " + answer + "\n";
  }
  return out;
}

common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileAfterOptionalReasoning(
    const grammar::CompiledGrammar& answer, const ReasoningTags& reasoning, const grammar::GrammarLimits& limits) {
  if (reasoning.open.empty() || reasoning.close.empty()) return Status::InvalidArgument("reasoning: empty tag");
  std::string outer = AvoidingRules("think", reasoning.close, "jws answer", /*may_end=*/false);
  outer += "jws ::= [ \\t\\n\\r]*\n";
  outer += "answer ::= \"x\"\n";  // the slot: CompiledGrammar::Around puts answer's root here
  outer += "root ::= " + Literal(reasoning.open) + " think-0 | answer\n";
  return grammar::CompiledGrammar::Around(outer, "answer", answer, limits);
}

common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileToolCallGrammar(
    std::span<const text::ToolDefinition> tools, ToolCallFamily family, const ToolChoice& choice,
    const ToolGrammarOptions& options) {
  auto gbnf = ToolCallGbnf(tools, family, choice, options);
  if (!gbnf.ok()) return gbnf.status();
  auto g = grammar::CompiledGrammar::FromGbnf(*gbnf, options.limits);
  if (!g.ok()) return Status(g.status().code(), "tool call grammar: " + g.status().message());
  return g;
}

size_t ToolChoiceGrammars::memory_bytes() const {
  size_t bytes = sizeof(ToolChoiceGrammars);
  if (automatic != nullptr) bytes += automatic->memory_bytes();
  if (required != nullptr) bytes += required->memory_bytes();
  for (const auto& [name, grammar] : named) bytes += name.capacity() + (grammar != nullptr ? grammar->memory_bytes() : 0) + 64;
  return bytes;
}

common::StatusOr<std::shared_ptr<const ToolChoiceGrammars>> CompileToolChoiceGrammars(
    std::span<const text::ToolDefinition> tools, ToolCallFamily family, const ToolGrammarOptions& options) {
  auto grammars = std::make_shared<ToolChoiceGrammars>();
  auto automatic = CompileToolCallGrammar(tools, family, ToolChoice{ToolChoiceMode::kAuto, ""}, options);
  if (!automatic.ok()) return automatic.status();
  grammars->automatic = std::move(automatic).value();
  auto required = CompileToolCallGrammar(tools, family, ToolChoice{ToolChoiceMode::kRequired, ""}, options);
  if (!required.ok()) return required.status();
  grammars->required = std::move(required).value();
  for (const text::ToolDefinition& tool : tools) {
    auto named = CompileToolCallGrammar(tools, family, ToolChoice{ToolChoiceMode::kNamed, tool.name}, options);
    if (!named.ok()) return named.status();
    grammars->named.emplace(tool.name, std::move(named).value());
  }
  return std::shared_ptr<const ToolChoiceGrammars>(std::move(grammars));
}

}  // namespace niels::daemon::tool_grammar
