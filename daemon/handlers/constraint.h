#pragma once
// Structured output in the handlers (proto/PROTOCOL.md, "Structured output"): a request's Constraint
// compiled to a grammar. A constraint with client-supplied text (ConstraintCompilesText) is compiled
// on the compile worker (compile_worker.h) before the request joins the engine's queue, so that an
// invalid grammar is answered without the engine and a large one holds up neither an IO thread nor
// the engine thread, where every running request's decode steps are. Pure functions; any thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/budgets.h"
#include "common/status.h"
#include "daemon/engine/engine_state.h"
#include "daemon/sampling/sampler.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/rule_set.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// The longest constraint texts accepted (InfoResponse.max_json_schema_bytes, max_gbnf_bytes). They
// bound what one request can make the compile worker spend compiling: measured with
// nielsd-constraint-bench, a hostile 64 KiB schema (2460 properties, all required) compiles in
// ~60 ms, a 256 KiB GBNF in ~30 ms; typical schemas in 0.3-0.6 ms.
inline constexpr size_t kMaxJsonSchemaBytes = common::kJsonSchemaBytesLimit;
inline constexpr size_t kMaxGbnfBytes = common::kGbnfBytesLimit;

// The GrammarLimits a constraint's grammar is compiled with (daemon/grammar/rule_set.h documents
// each bound): the grammar room's defaults, GBNF text at most kMaxGbnfBytes. A schema's generated
// grammar keeps the default 1 MiB.
grammar::GrammarLimits ConstraintGrammarLimits();

// Whether CompileConstraint compiles text the client sent (a json_schema or gbnf constraint), the
// work that runs on the compile worker. False for no constraint, any_json (a grammar built once per
// process) and a Constraint with no kind (refused at once).
bool ConstraintCompilesText(bool has_constraint, const niels::v1::Constraint& constraint);

// Polled by a compile: true once its request was cancelled (or the daemon stops). Empty: never.
using CompileCancelled = std::function<bool()>;

// The constraint's grammar, or null when the request has none. INVALID_ARGUMENT, the message
// prefixed with the field ("constraint.gbnf: grammar line 3, column 7: ..."), for a Constraint with
// no kind set, a grammar or schema that does not compile (the grammar room's messages name the
// position and the reason), or one beyond the limits above ("too large", naming the limit).
// CANCELLED ("the request was cancelled") when `cancelled` is true before the compile starts, while
// it runs (the compilers poll it every grammar::kCancelPollUnits work units, GrammarLimits::
// cancelled) or once it is done.
common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    bool has_constraint, const niels::v1::Constraint& constraint, const CompileCancelled& cancelled = {});

// Whether a compiled constraint can run with these stop ids and sampling (engine thread: it reads
// the model's vocabulary): UNIMPLEMENTED when the model has no vocabulary for constraints
// (EngineState::constraint_vocabulary); INVALID_ARGUMENT naming the id when a stop id is a text id
// (the output may end only on a special id, where the text is complete) or when every stop id is
// banned. Cost: O(banned ids) to build their set (linear for ascending ids, as SamplingFromProto
// gives them) and O(log banned) per stop id.
common::Status CheckConstraintUsable(const engine::EngineState& state, const sampling::SamplingParams& sampling,
                                     std::span<const int32_t> stop_ids);

// The kinds CompileConstraint takes, as InfoResponse.constraint_kinds names them.
inline constexpr const char* kConstraintKinds[] = {"json_schema", "gbnf", "any_json"};

}  // namespace niels::daemon::handlers
