#pragma once
// StepPlanner: decides what model work one iteration of the engine runs for its running turns
// (docs/ARCHITECTURE.md, "Engine: scheduling and batching", step 3). The Engine executes the plan.
//
// A plan has up to three parts:
//  - traced_prefill: one prefilling turn that traces attention (Generate with trace_layer), round
//    robin; its next chunk runs on its own (its last position must go through Decode);
//  - inputs/rows: ONE batched forward step holding the next prefill chunks of the prefilling turns
//    (round robin, up to prefill_chunk tokens in all, 4x that for a turn running alone with nothing
//    waiting) and one row for every decoding turn. Only the rows that sample get logits. The step is
//    row-invariant: nobody's result depends on who else is in it. An uncached turn
//    (use_kv_cache = false) is a prefilling turn whose every id's forward window is prefilled this
//    way, chunk by chunk, within the same budget; the windows share one pool, so one uncached
//    turn's window is in flight at a time (the begun one goes on; then the round robin picks);
//  - traced_decodes: decoding turns that trace a layer, grouped by layer (a step traces one layer).
// So an iteration's model step computes at most the prefill budget of prompt and window positions
// plus one position per decoding turn, whatever the requests are.
// A turn whose prefill ends in this step samples its first id and decodes from the next iteration
// on, so quick requests get in between its first two tokens. Nothing starves: the round robin
// positions move on every iteration, and every decoding turn is in every step.
//
// Planning reads every candidate's cancel flag (GenerationTask::PrepareStep): a cancelled turn is
// left out and ends. Engine thread only.

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "daemon/engine/turn.h"
#include "daemon/model/language_model.h"

namespace niels::daemon::engine {

struct StepPlan {
  // Whose each input of the batched step is.
  struct Row {
    Turn* turn;
    bool prefill;       // a prefill chunk (else a decode row)
    bool wants_logits;  // the row is sampled from
  };
  Turn* traced_prefill = nullptr;
  std::vector<model::SequenceInput> inputs;  // the batched step, in order
  std::vector<Row> rows;                     // rows[i] is inputs[i]'s
  int64_t decode_rows = 0;                   // rows of `rows` that decode
  std::map<int64_t, std::vector<Turn*>> traced_decodes;  // layer -> turns
};

class StepPlanner {
 public:
  // `prefill_chunk`: prompt tokens per iteration, all prefilling turns together (>= 1).
  explicit StepPlanner(int64_t prefill_chunk) : prefill_chunk_(prefill_chunk) {}

  // The plan for `running` (in admission order). `alone_and_idle`: one turn runs and nothing waits.
  StepPlan Plan(std::span<Turn* const> running, bool alone_and_idle);
  // The running list shrank to `running` turns: keeps the round-robin positions in range.
  void Retired(size_t running);

 private:
  int64_t prefill_chunk_;
  size_t next_prefill_ = 0;   // round-robin position among prefilling turns
};

}  // namespace niels::daemon::engine
