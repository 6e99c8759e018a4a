#pragma once
// Budgets: the documented bounds on what one request can make nielsd do or hold (proto/PROTOCOL.md,
// "Limits"). This file is the one list of them: InfoResponse.budgets reports it, each room that
// enforces a budget reads its numbers from here, and every refusal is counted here for
// StatsResponse.budget_refusals.
//
// A budget counts units of work or memory (comparisons, steps, rules, states, bytes, ids) and
// allows
//
//     per_request_byte x (the bytes of what it bounds) + per_new_token x max_new_tokens + fixed
//
// of them; a plain count limit (a list's length) has only `fixed`. A request past a budget fails
// before it has changed anything, with RESOURCE_EXHAUSTED for work and memory budgets and
// INVALID_ARGUMENT for length limits; the message says what was over and ends with the budget's
// name ("stop_ids: 65 ids (the limit is 64) (budget stop_ids)"). Refuse() builds that status and
// counts the refusal.
//
// Thread-safe: the table is constant; the refusal counters are atomics any thread may bump.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace niels::common {

// The numbers. Rooms alias them under their own names (handlers' kMaxStopIds, ...).
inline constexpr size_t kStopIdsLimit = 64;                        // GenerateRequest.stop_ids
inline constexpr size_t kJsonSchemaBytesLimit = size_t{64} << 10;  // Constraint.json_schema
inline constexpr size_t kGbnfBytesLimit = size_t{256} << 10;       // Constraint.gbnf
inline constexpr size_t kTokenizeTextBytesLimit = size_t{128} << 10;
inline constexpr size_t kSystemPromptBytesLimit = size_t{128} << 10;
inline constexpr size_t kUserTextBytesLimit = size_t{128} << 10;  // ChatRequest.user_text
// A constraint's grammar after rewriting (daemon/grammar/rule_set.h, GrammarLimits), and the GBNF a
// JSON Schema may generate.
inline constexpr size_t kGrammarRulesLimit = 100'000;
inline constexpr size_t kGrammarSymbolsLimit = 1'000'000;
inline constexpr size_t kSchemaGrammarBytesLimit = size_t{1} << 20;
inline constexpr size_t kStopStringsLimit = 16;       // Chat/GenerateRequest.stop_strings
inline constexpr size_t kStopStringBytesLimit = 128;  // each of them
inline constexpr size_t kDetokenizeIdsLimit = size_t{1} << 16;
// The constraint compilers' work units (daemon/grammar/rule_set.h, WorkMeter): JSON Schema -> GBNF
// and GBNF -> grammar, each a x its input's bytes + b.
inline constexpr uint64_t kSchemaCompileStepsPerByte = 256;
inline constexpr uint64_t kSchemaCompileStepsFixed = 1'000'000;
inline constexpr uint64_t kGrammarCompileStepsPerByte = 64;
inline constexpr uint64_t kGrammarCompileStepsFixed = 2'000'000;
// The grammar matcher (daemon/grammar/matcher_core.h, MatcherLimits): steps in one generated
// token's window (the start state's window too: fixed) and the bytes it holds.
inline constexpr uint64_t kMatcherStepsPerToken = 250'000;
inline constexpr size_t kMatcherMemoryBytes = size_t{64} << 20;
// The compile worker (daemon/handlers/compile_worker.h): constraints queued or compiling, and
// background requests (WeightStats) queued or running.
inline constexpr size_t kCompileQueueLimit = 64;
inline constexpr size_t kCompileQueuePerUidLimit = 16;
// Conversations and tools (ChatRequest.messages, CreateSession/ChatRequest.tools).
inline constexpr size_t kChatMessagesLimit = 256;                  // ChatRequest.messages
inline constexpr size_t kChatMessageBytesLimit = size_t{1} << 20;  // all their text
inline constexpr size_t kToolsLimit = 64;                          // tools of a ToolSet
inline constexpr size_t kToolBytesLimit = size_t{256} << 10;       // all their text
inline constexpr size_t kToolCallsPerReplyLimit = 16;              // calls of one assistant message
// Weight statistics (WeightStatsRequest): its name patterns, and what they may select.
inline constexpr size_t kWeightStatsNamesLimit = 16;               // WeightStatsRequest.names
inline constexpr size_t kWeightStatsNameBytesLimit = 128;          // each of them
inline constexpr size_t kWeightStatsTensorsLimit = 1024;           // tensors matched
inline constexpr uint64_t kWeightStatsElementsLimit = uint64_t{1} << 31;  // their elements in all
inline constexpr size_t kStepAlternativesLimit = 1000;              // top_logprobs, sampled_top_logprobs
inline constexpr uint64_t kStepAlternativeEntriesLimit = uint64_t{1} << 22;  // their entries per request
// Activation probes (GenerateRequest.probes; daemon/model/hook_sites.h): site patterns, the sites
// they select, and the statistics a request may produce (a compact statistic is 1 unit, a full one 5:
// about 64 and 320 bytes on the wire).
inline constexpr size_t kProbeSitePatternsLimit = 16;      // ProbeSpec.sites
inline constexpr size_t kProbeSitePatternBytesLimit = 128; // each of them
inline constexpr size_t kProbeSitesLimit = 1024;           // the sites they select
inline constexpr uint64_t kProbeStatisticsLimit = uint64_t{1} << 17;  // units, per token and aggregated
inline constexpr uint64_t kProbeTotalValuesLimit = uint64_t{1} << 24;  // values a full total keeps (64 MiB)

enum class BudgetId : uint8_t {
  kBannedIds,          // Sampling.banned_ids of one request: at most the vocabulary size
  kStopIds,            // GenerateRequest.stop_ids of one request
  kJsonSchemaBytes,    // Constraint.json_schema text
  kGbnfBytes,          // Constraint.gbnf text
  kTokenizeTextBytes,  // TokenizeRequest.text
  kSystemPromptBytes,  // CreateSessionRequest.system_prompt
  kDetokenizeIds,      // DetokenizeRequest.ids
  kSchemaCompileSteps,   // the JSON Schema compiler's work on one schema
  kGrammarCompileSteps,  // the GBNF compiler's work on one grammar (a schema's generated one too)
  kMatcherStepsPerToken, // the grammar matcher's work per generated token
  kMatcherMemoryBytes,   // the memory one request's grammar matcher holds
  kCompileQueue,         // constraints queued or compiling, all users
  kCompileQueuePerUid,   // constraints queued or compiling, one user
  kUserTextBytes,        // ChatRequest.user_text
  kStopStrings,          // Chat/GenerateRequest.stop_strings of one request
  kStopStringBytes,      // the bytes of one stop string
  kGrammarRules,         // rules of a constraint's grammar after rewriting groups and repetitions
  kGrammarSymbols,       // symbols of a constraint's grammar after expanding repetitions
  kSchemaGrammarBytes,   // the GBNF a JSON Schema constraint generates
  kChatMessages,         // ChatRequest.messages of one request
  kChatMessageBytes,     // the text of all of them (contents, reasoning, tool calls, ids)
  kTools,                // tools of one ToolSet
  kToolBytes,            // the text of all of them (names, descriptions, parameters)
  kToolCallsPerReply,    // tool calls of one assistant message (sent, or made by a reply)
  kLogitBias,            // Sampling.logit_bias entries of one request: at most the vocabulary size
  kWeightStatsNames,     // WeightStatsRequest.names of one request
  kWeightStatsNameBytes, // the bytes of one of them
  kWeightStatsTensors,   // the tensors one WeightStatsRequest matches
  kWeightStatsElements,  // the elements of those tensors, in all
  kStepAlternatives,     // top_logprobs, sampled_top_logprobs of one Generate or Chat
  kStepAlternativeEntries,  // the alternatives its steps hold in all
  kProbeSitePatterns,    // ProbeSpec.sites of one request
  kProbeSitePatternBytes, // the bytes of one of them
  kProbeSites,           // the hook sites they select
  kProbeStatistics,      // the activation statistics one request produces
  kProbeTotalValues,     // the activation values one request's full totals keep
  kCount,
};

struct Budget {
  BudgetId id;
  std::string_view name;  // as InfoResponse.budgets and error messages spell it
  std::string_view unit;  // "bytes", "ids", "steps", "requests", ...
  uint64_t per_request_byte;
  uint64_t per_new_token;
  uint64_t fixed;
  StatusCode refusal;     // the code a request past it gets
  std::string_view bounds;  // one line: what it bounds
};

// Every budget, in BudgetId order.
std::span<const Budget> Budgets();
const Budget& GetBudget(BudgetId id);

// The allowance for a request: per_request_byte x request_bytes + per_new_token x max_new_tokens +
// fixed, saturating at UINT64_MAX.
uint64_t Allowance(BudgetId id, uint64_t request_bytes, uint64_t max_new_tokens = 0);

// Counts one refusal under `id` and returns its status: the budget's code, and the message
// "<what> (budget <name>)".
Status Refuse(BudgetId id, std::string_view what);

// Refusals counted under `id` since the process started.
uint64_t Refusals(BudgetId id);

}  // namespace niels::common
