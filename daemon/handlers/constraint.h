#pragma once
// Structured output in the handlers (proto/PROTOCOL.md, "Structured output"): a request's Constraint
// compiled to a grammar. Compiled on the thread that submits the request (an IO thread), before the
// request is queued, so that an invalid grammar is answered at once and a large one never holds up
// the engine thread, where every running request's decode steps are. Pure functions; any thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/sampling/sampler.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/rule_set.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// What a constraint may cost to compile (daemon/grammar/rule_set.h documents each bound; the JSON
// Schema text has the same 1 MiB limit). InfoResponse.max_constraint_bytes reports the text limit.
grammar::GrammarLimits ConstraintGrammarLimits();

// The constraint's grammar, or null when the request has none. INVALID_ARGUMENT, the message
// prefixed with the field ("constraint.gbnf: grammar line 3, column 7: ..."), for a Constraint with
// no kind set, a grammar or schema that does not compile (the grammar room's messages name the
// position and the reason), or one beyond ConstraintGrammarLimits().
common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    bool has_constraint, const niels::v1::Constraint& constraint);

// Whether a compiled constraint can run with these stop ids and sampling (engine thread: it reads
// the model's vocabulary): UNIMPLEMENTED when the model has no vocabulary for constraints
// (EngineState::constraint_vocabulary); INVALID_ARGUMENT naming the id when a stop id is a text id
// (the output may end only on a special id, where the text is complete) or when every stop id is
// banned.
common::Status CheckConstraintUsable(const engine::EngineState& state, const sampling::SamplingParams& sampling,
                                     std::span<const int32_t> stop_ids);

// The kinds CompileConstraint takes, as InfoResponse.constraint_kinds names them.
inline constexpr const char* kConstraintKinds[] = {"json_schema", "gbnf", "any_json"};

}  // namespace niels::daemon::handlers
