#include "daemon/engine/step_planner.h"

namespace niels::daemon::engine {

namespace {

// The next index at or after `from` (cyclically) whose turn satisfies `pick`, or -1.
template <typename Pick>
int64_t NextRoundRobin(std::span<Turn* const> running, size_t from, Pick&& pick) {
  const size_t n = running.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (from + k) % n;
    if (pick(*running[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

StepPlan StepPlanner::Plan(std::span<Turn* const> running, bool alone_and_idle) {
  StepPlan plan;
  const int64_t traced = NextRoundRobin(running, next_prefill_, [](Turn& t) {
    return t.prefilling() && !t.task().mixable_prefill();
  });
  if (traced >= 0) plan.traced_prefill = running[traced];
  // Uncached turns' forward windows share one window pool (LanguageModel::NewForwardCache): only
  // the turn whose window is begun may go on, else the first uncached turn the round robin reaches.
  const Turn* window_owner = nullptr;
  for (Turn* turn : running) {
    if (!turn->cached() && turn->task().forward_in_flight()) window_owner = turn;
  }
  bool window_taken = false;

  // Prefill chunks, round robin from next_prefill_, until the budget is spent. A turn running alone
  // prefills in pieces four times as large: the pieces only exist so that others get steps in
  // between (a re-prefill after the context limit then costs about what one full forward costs).
  int64_t budget = alone_and_idle ? 4 * prefill_chunk_ : prefill_chunk_;
  size_t last_prefilled = running.size();
  for (size_t k = 0; k < running.size() && budget > 0; ++k) {
    const size_t i = (next_prefill_ + k) % running.size();
    GenerationTask& task = running[i]->task();
    if (!task.mixable_prefill()) continue;
    if (!task.use_kv_cache()) {
      if (window_owner != nullptr ? running[i] != window_owner : window_taken) continue;
      window_taken = true;
    }
    const std::span<const int32_t> chunk = task.PendingChunk(budget);
    if (chunk.empty()) continue;
    const bool samples = task.ChunkSamples(static_cast<int64_t>(chunk.size()));
    plan.inputs.push_back(
        {.cache = &task.filled_cache(), .tokens = chunk, .want_logits = samples, .observer = task.observer()});
    plan.rows.push_back({running[i], /*prefill=*/true, samples});
    budget -= static_cast<int64_t>(chunk.size());
    last_prefilled = i;
  }
  if (last_prefilled < running.size()) {
    next_prefill_ = last_prefilled + 1;
  } else if (traced >= 0) {
    next_prefill_ = static_cast<size_t>(traced) + 1;
  }

  // Decode rows; traced ones grouped by layer into their own steps.
  for (Turn* turn : running) {
    if (turn == plan.traced_prefill || !turn->cached() || !turn->task().PrepareStep()) continue;
    if (turn->task().trace_layer() >= 0) {
      plan.traced_decodes[turn->task().trace_layer()].push_back(turn);
      continue;
    }
    plan.inputs.push_back({.cache = &turn->task().cache(),
                           .tokens = turn->task().decode_input(),
                           .want_logits = true,
                           .observer = turn->task().observer()});
    plan.rows.push_back({turn, /*prefill=*/false, /*wants_logits=*/true});
    ++plan.decode_rows;
  }
  return plan;
}

void StepPlanner::Retired(size_t running) {
  if (next_prefill_ >= running) next_prefill_ = 0;
}

}  // namespace niels::daemon::engine
