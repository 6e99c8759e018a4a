#pragma once
// Tool-call grammars: the grammar (daemon/grammar) whose sentences are exactly the tool calls a
// family's parser (daemon/tool_calls/tool_call_parser.h) accepts for a session's tools, each call's
// arguments following its tool's parameters schema (compiled by grammar/json_schema.h). A reply
// constrained by it (engine/output_constraint.h, as any constraint) always parses into valid calls.
//
// The shapes written (one space after ':' and ',', as the families' templates render calls):
//   kHermes:      <tool_call>\n{"name": "<n>", "arguments": <args>}\n</tool_call>, several calls
//                 separated by "\n" (content to the parser, as Qwen writes it);
//   kLlama3Json:  {"name": "<n>", "parameters": <args>}, one call;
//   kGenericJson: {"tool_calls": [{"name": "<n>", "arguments": <args>}, ...]}, ", " between calls.
// The tool choice:
//   kRequired: the reply is one or more calls (up to max_calls), any of the tools, from its first
//              byte;
//   kNamed:    the same with only the tool `name`;
//   kAuto:     a lazy constraint: free text until the family's trigger, then a call. kHermes: any
//              text in which `<tool_call>` may appear only as the start of a call (the free text
//              cannot contain it otherwise), a call after each one, up to max_calls, with free text
//              between and after them. kLlama3Json and kGenericJson: the trigger is the reply's
//              first character after JSON whitespace (space, tab, newline, carriage return): `{`
//              opens the call (the whole reply is then that call); any other first character makes
//              the whole reply free text. (Llama's `<|python_tag|>` is a special id, never generated
//              under a constraint: calls are written without it.)
// With `reasoning` tags set (a model that may think first, e.g. Qwen3's "<think>", "</think>"), the
// reply may begin with one reasoning block: the open tag, any text not containing the close tag,
// the close tag, then JSON whitespace; the choice applies from the first byte after it ("from the
// first token after reasoning"). The reasoning text itself is not constrained.
// Arguments follow the schema grammar with one narrowing: a number's exponent has at most two
// digits, so that every number fits a double (the parser refuses one that does not).
//
// Errors (INVALID_ARGUMENT naming the field; nothing is kept): no tools; a tool name that is empty,
// repeated, or not writable as a JSON string without escapes (a '"', a '\\' or a control
// character); a tool's parameters that are not a schema the compiler takes, or one whose values are
// not all JSON objects (the parser takes only objects as arguments) -- "tools[2].parameters: ...";
// a kNamed choice naming no tool ("tool_choice.name: ..."); max_calls 0. Budgets: each tool's schema
// compiles under the json schema compile work budget of `limits.grammar` for its own bytes, the
// whole grammar under the grammar compile work budget for its own text (rule_set.h), so the work is
// linear in the tools' schemas; past either, RESOURCE_EXHAUSTED naming the budget. Compile it off
// the engine and IO threads (handlers/compile_worker.h), as any constraint.

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/rule_set.h"
#include "daemon/text/chat_format.h"
#include "daemon/tool_calls/tool_call_parser.h"

namespace niels::daemon::tool_grammar {

enum class ToolChoiceMode { kAuto, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;  // kNamed: the tool
};

struct ReasoningTags {
  std::string open;   // e.g. "<think>"
  std::string close;  // e.g. "</think>"
};

struct ToolGrammarOptions {
  grammar::GrammarLimits limits;
  // Most calls one reply may make (kHermes, kGenericJson; kLlama3Json makes one). At least 1.
  size_t max_calls = 8;
  // A reasoning block the reply may begin with (see above); none when unset.
  std::optional<ReasoningTags> reasoning;
};

// A client's grammar for the answer of a model that may reason first: a sentence of `answer`, or
// one reasoning block (the open tag, any text not containing the close tag, the close tag, JSON
// whitespace) followed by a sentence of `answer` -- the shape the tool-call grammars give a
// reasoning block, so that a structured reply leaves the reasoning free and constrains from the
// first byte after it. Errors: INVALID_ARGUMENT for an empty tag; RESOURCE_EXHAUSTED past the
// grammar compile work budget of `limits` (the reasoning rules are linear in the close tag's
// length, the rest is answer's size: CompiledGrammar::Around).
common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileAfterOptionalReasoning(
    const grammar::CompiledGrammar& answer, const ReasoningTags& reasoning, const grammar::GrammarLimits& limits = {});

// The GBNF text of the grammar (root ::= the reply).
common::StatusOr<std::string> ToolCallGbnf(std::span<const text::ToolDefinition> tools, tool_calls::ToolCallFamily family,
                                           const ToolChoice& choice, const ToolGrammarOptions& options = {});

// ToolCallGbnf compiled (CompiledGrammar::FromGbnf under options.limits).
common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileToolCallGrammar(
    std::span<const text::ToolDefinition> tools, tool_calls::ToolCallFamily family, const ToolChoice& choice,
    const ToolGrammarOptions& options = {});

// The grammars a tool set's choices need, compiled once when the tools are set (off the engine
// thread): `automatic` (kAuto: free text with calls after the trigger), `required` (any of the
// tools) and `named` (one per tool, by name).
struct ToolChoiceGrammars {
  std::shared_ptr<const grammar::CompiledGrammar> automatic;
  std::shared_ptr<const grammar::CompiledGrammar> required;
  std::map<std::string, std::shared_ptr<const grammar::CompiledGrammar>, std::less<>> named;

  // The heap bytes of all of them (CompiledGrammar::memory_bytes summed, with the names).
  size_t memory_bytes() const;
};

// CompileToolCallGrammar for kAuto, kRequired and kNamed of each tool: about three times the work
// of compiling the tools' schemas once (the auto and required grammars hold every tool's
// arguments, each named one its own tool's), under the same budgets. Errors as CompileToolCallGrammar.
common::StatusOr<std::shared_ptr<const ToolChoiceGrammars>> CompileToolChoiceGrammars(
    std::span<const text::ToolDefinition> tools, tool_calls::ToolCallFamily family,
    const ToolGrammarOptions& options = {});

}  // namespace niels::daemon::tool_grammar
