#pragma once
// StartChatTurn: one user/assistant turn on a session with the token-native chat template
// (docs/ARCHITECTURE.md, "Sessions and the KV cache"). Engine thread only.
//
// Context policy: a turn needs its own tokens plus room for the reply, R = min(max_new_tokens, T/4)
// tokens (at least 1). When history + turn + R > T the oldest complete turns are dropped (the
// system prompt stays, with its cached keys/values; the rest is re-prefilled) down to the low-water
// mark: until history + turn <= EngineOptions::context_keep x T (and history + turn + R <= T) or no
// turn is left, so that the re-prefill is paid once every several turns rather than every turn; the
// outcome reports truncated_turns. If even then the history plus the turn
// leaves no room for a single reply token: INVALID_ARGUMENT and the session is unchanged.
// A reply that ends without eot (max_new_tokens) still closes its turn with an eot in the history
// (uncached), so the history always reads [asst] reply [eot]; at the context limit the eot is added
// at the start of the next turn instead.

#include <cstdint>
#include <string>

#include "daemon/engine/turn.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/sampling/sampler.h"

namespace niels::daemon::engine {

struct ChatTurnArgs {
  std::string session_id;
  std::string user_text;            // REQUIRES: not empty
  int32_t max_new_tokens = 0;       // REQUIRES: >= 1
  bool use_kv_cache = true;
  sampling::SamplingParams sampling;   // REQUIRES: valid for the model's vocabulary
  // Structured output: the reply follows this grammar (output_constraint.h); null = free text.
  // REQUIRES with one: EngineState::constraint_vocabulary set, eot not banned.
  std::shared_ptr<const grammar::CompiledGrammar> constraint;
};

// Appends [usr] user_text [eot] [asst] to the session and returns the Turn that generates the reply
// (stopping at eot). Errors: NOT_FOUND / PERMISSION_DENIED for the session (SessionRegistry::Find),
// INVALID_ARGUMENT when the turn cannot fit (above), RESOURCE_EXHAUSTED when its KV need alone
// exceeds the budget; wait_for_memory when running turns hold that memory.
TurnResult StartChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                         TurnCallbacks callbacks);

}  // namespace niels::daemon::engine
