#include "common/budgets.h"

#include <array>
#include <atomic>
#include <limits>

#include <fmt/format.h>

namespace niels::common {

namespace {

constexpr StatusCode kLength = StatusCode::kInvalidArgument;
constexpr StatusCode kWork = StatusCode::kResourceExhausted;

// In BudgetId order (checked below).
constexpr std::array<Budget, static_cast<size_t>(BudgetId::kCount)> kBudgets = {{
    {BudgetId::kBannedIds, "banned_ids", "ids", 0, 0, 0, kLength,
     "Sampling.banned_ids of one request, repeats counted: at most the vocabulary size"},
    {BudgetId::kStopIds, "stop_ids", "ids", 0, 0, kStopIdsLimit, kLength,
     "GenerateRequest.stop_ids of one request, repeats counted"},
    {BudgetId::kJsonSchemaBytes, "json_schema_bytes", "bytes", 0, 0, kJsonSchemaBytesLimit, kLength,
     "Constraint.json_schema text"},
    {BudgetId::kGbnfBytes, "gbnf_bytes", "bytes", 0, 0, kGbnfBytesLimit, kLength, "Constraint.gbnf text"},
    {BudgetId::kTokenizeTextBytes, "tokenize_text_bytes", "bytes", 0, 0, kTokenizeTextBytesLimit, kLength,
     "TokenizeRequest.text, encoded on the engine thread"},
    {BudgetId::kSystemPromptBytes, "system_prompt_bytes", "bytes", 0, 0, kSystemPromptBytesLimit, kLength,
     "CreateSessionRequest.system_prompt, encoded on the engine thread"},
    {BudgetId::kDetokenizeIds, "detokenize_ids", "ids", 0, 0, kDetokenizeIdsLimit, kLength,
     "DetokenizeRequest.ids, decoded on the engine thread"},
    {BudgetId::kSchemaCompileSteps, "schema_compile_steps", "steps", kSchemaCompileStepsPerByte, 0,
     kSchemaCompileStepsFixed, kWork, "compiling a Constraint.json_schema to GBNF, per byte of the schema"},
    {BudgetId::kGrammarCompileSteps, "grammar_compile_steps", "steps", kGrammarCompileStepsPerByte, 0,
     kGrammarCompileStepsFixed, kWork, "compiling a GBNF grammar (given, or generated from a schema), per byte of it"},
    {BudgetId::kMatcherStepsPerToken, "matcher_steps_per_token", "steps", 0, kMatcherStepsPerToken,
     kMatcherStepsPerToken, kWork, "the grammar matcher's steps for each generated token (and the start state)"},
    {BudgetId::kMatcherMemoryBytes, "matcher_memory_bytes", "bytes", 0, 0, kMatcherMemoryBytes, kWork,
     "memory one constrained request's grammar matcher holds"},
    {BudgetId::kCompileQueue, "compile_queue", "requests", 0, 0, kCompileQueueLimit, kWork,
     "constraints queued or compiling on the compile worker, all users"},
    {BudgetId::kCompileQueuePerUid, "compile_queue_per_uid", "requests", 0, 0, kCompileQueuePerUidLimit, kWork,
     "constraints of one user queued or compiling (one compiles at a time)"},
    {BudgetId::kUserTextBytes, "user_text_bytes", "bytes", 0, 0, kUserTextBytesLimit, kLength,
     "ChatRequest.user_text, the new turn encoded on the engine thread"},
}};

constexpr bool InIdOrder() {
  for (size_t i = 0; i < kBudgets.size(); ++i) {
    if (static_cast<size_t>(kBudgets[i].id) != i) return false;
  }
  return true;
}
static_assert(InIdOrder(), "kBudgets must list the budgets in BudgetId order");

std::array<std::atomic<uint64_t>, kBudgets.size()> refusals{};

uint64_t SaturatingMulAdd(uint64_t a, uint64_t b, uint64_t c) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (b != 0 && a > (kMax - c) / b) return kMax;
  return a * b + c;
}

}  // namespace

std::span<const Budget> Budgets() { return kBudgets; }

const Budget& GetBudget(BudgetId id) { return kBudgets[static_cast<size_t>(id)]; }

uint64_t Allowance(BudgetId id, uint64_t request_bytes, uint64_t max_new_tokens) {
  const Budget& b = GetBudget(id);
  const uint64_t per_token = SaturatingMulAdd(b.per_new_token, max_new_tokens, b.fixed);
  return SaturatingMulAdd(b.per_request_byte, request_bytes, per_token);
}

Status Refuse(BudgetId id, std::string_view what) {
  const Budget& b = GetBudget(id);
  refusals[static_cast<size_t>(id)].fetch_add(1, std::memory_order_relaxed);
  return Status(b.refusal, fmt::format("{} (budget {})", what, b.name));
}

uint64_t Refusals(BudgetId id) { return refusals[static_cast<size_t>(id)].load(std::memory_order_relaxed); }

}  // namespace niels::common
