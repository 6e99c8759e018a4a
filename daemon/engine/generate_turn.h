#pragma once
// StartGenerateTurn: raw generation with the session as the cache (the seeds' generate()): input ids
// appended and processed first, then up to max_new_tokens ids sampled (generator.h has the exact
// rules). Engine thread only.

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/engine/generator.h"
#include "daemon/engine/turn.h"

namespace niels::daemon::engine {

struct GenerateTurnArgs {
  std::string session_id;
  std::vector<int32_t> input;  // REQUIRES: every id in [0, V)
  // REQUIRES: valid for the model (sampling params, stop ids in range, trace_layer < L and only on
  // the cached path). cancel and on_token are set by the Turn.
  GenerateOptions options;
};

// Errors: NOT_FOUND / PERMISSION_DENIED for the session, INVALID_ARGUMENT when the input does not
// fit the context (or there is nothing to continue from), RESOURCE_EXHAUSTED when its KV need alone
// exceeds the budget; wait_for_memory when running turns hold that memory.
TurnResult StartGenerateTurn(EngineState& state, const Work& work, GenerateTurnArgs args,
                             TurnCallbacks callbacks);

}  // namespace niels::daemon::engine
