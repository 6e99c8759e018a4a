#pragma once
// The request handlers, one file per request kind (docs/ARCHITECTURE.md, "Requests and their
// handlers"). Each turns its wire request into typed arguments, validates them once, and calls the
// protocol-free engine (daemon/engine); then it turns the engine's answer into the wire response.
// The method table (method_table.h) says which handler serves which kind.
//
// Quick handlers return the final Response (request_id is set by the Job) or a non-OK Status that
// is sent as Error. Generating handlers return the engine Turn to run; its callbacks stream the
// events and send the final response through the request's server::Job, which outlives the Turn
// (the Service's Work owns it, and the Turn owns the Work). Everything here runs on the engine
// thread, except the Prepare functions (see "Generating") and the background handlers (see
// "Background").

#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/turn.h"
#include "daemon/engine/work.h"
#include "daemon/handlers/constraint.h"
#include "daemon/handlers/weight_stats_cache.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/text/chat_format.h"
#include "daemon/tool_grammar/tool_call_grammar.h"
#include "daemon/server/job.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

using HandlerResult = common::StatusOr<niels::v1::Response>;

// Quick.
HandlerResult HandleInfo(engine::EngineState& state, server::Job& job, const niels::v1::InfoRequest& request);
HandlerResult HandleStats(engine::EngineState& state, server::Job& job, const niels::v1::StatsRequest& request);
HandlerResult HandleTokenize(engine::EngineState& state, server::Job& job,
                             const niels::v1::TokenizeRequest& request);
HandlerResult HandleDetokenize(engine::EngineState& state, server::Job& job,
                               const niels::v1::DetokenizeRequest& request);
// CreateSession without a system prompt (with one: StartCreateSession).
HandlerResult HandleCreateSession(engine::EngineState& state, server::Job& job,
                                  const niels::v1::CreateSessionRequest& request);
HandlerResult HandleGetSession(engine::EngineState& state, server::Job& job,
                               const niels::v1::GetSessionRequest& request);
HandlerResult HandleListSessions(engine::EngineState& state, server::Job& job,
                                 const niels::v1::ListSessionsRequest& request);
HandlerResult HandleForkSession(engine::EngineState& state, server::Job& job,
                                const niels::v1::ForkSessionRequest& request);
HandlerResult HandleRewindSession(engine::EngineState& state, server::Job& job,
                                  const niels::v1::RewindSessionRequest& request);
HandlerResult HandleResetSession(engine::EngineState& state, server::Job& job,
                                 const niels::v1::ResetSessionRequest& request);
HandlerResult HandleDeleteSession(engine::EngineState& state, server::Job& job,
                                  const niels::v1::DeleteSessionRequest& request);

// Generating. A generating request is first prepared, before it joins the engine's queue
// (Service::Submit): its constraint is compiled (constraint.h), so an invalid one is answered without
// the engine. When the request carries constraint text (ChatCompiles / GenerateCompiles), Prepare
// runs on the compile worker (compile_worker.h) and polls `cancelled`; otherwise it is cheap and
// runs on the submitting thread. An error from Prepare is the request's answer; nothing was queued
// or changed.
// What a prepare step knows of the model (read once at start, immutable).
struct PrepareContext {
  // The model's tool-call family (engine_state.h); nullopt: tools are refused.
  std::optional<tool_calls::ToolCallFamily> tool_call_family;
  // The reasoning block a reply may begin with; nullopt when replies carry none.
  std::optional<text::ReasoningTags> reasoning;
};

struct Prepared {
  std::shared_ptr<const grammar::CompiledGrammar> constraint;  // null: no constraint
  // The request's ToolSet, checked and compiled (chat_messages.h): unset when the request has none;
  // set to null for an empty one.
  std::optional<std::shared_ptr<const std::vector<text::ToolDefinition>>> tools = {};
  // With tools: the grammars tool_choice required and named constrain replies with, compiled with
  // them (engine::ToolGrammarCache); null with the reason in tool_grammars_status when the tools
  // cannot be forced (a schema the tool grammar does not take).
  std::shared_ptr<const tool_grammar::ToolChoiceGrammars> tool_grammars = {};
  common::Status tool_grammars_status = {};
};
// With prepared.tools set (non-null) and a model with a tool-call family: compiles
// prepared.tool_grammars (tool_grammar::CompileToolChoiceGrammars under the constraint budgets). A
// tool set the tool grammar does not take (INVALID_ARGUMENT) leaves them null with the reason in
// tool_grammars_status, which only a forced tool_choice reports; RESOURCE_EXHAUSTED and CANCELLED
// are the request's answer.
common::Status CompileToolGrammars(const PrepareContext& context, const CompileCancelled& cancelled,
                                   Prepared& prepared);

bool ChatCompiles(const niels::v1::ChatRequest& request);
bool GenerateCompiles(const niels::v1::GenerateRequest& request);
common::StatusOr<Prepared> PrepareChat(const niels::v1::ChatRequest& request, const PrepareContext& context,
                                       const CompileCancelled& cancelled);
common::StatusOr<Prepared> PrepareGenerate(const niels::v1::GenerateRequest& request, const PrepareContext& context,
                                           const CompileCancelled& cancelled);
engine::TurnResult StartChat(engine::EngineState& state, const engine::Work& work, server::Job& job,
                             const niels::v1::ChatRequest& request, const Prepared& prepared);
engine::TurnResult StartGenerate(engine::EngineState& state, const engine::Work& work, server::Job& job,
                                 const niels::v1::GenerateRequest& request, const Prepared& prepared);
// CreateSession with a system prompt is generating: the session's start is prefilled by a turn of
// the scheduler, like any prompt; a session with nothing to prefill is answered at once (TurnStart
// without a turn).
bool CreateSessionCompiles(const niels::v1::CreateSessionRequest& request);
common::StatusOr<Prepared> PrepareCreateSession(const niels::v1::CreateSessionRequest& request,
                                                const PrepareContext& context, const CompileCancelled& cancelled);
engine::TurnResult StartCreateSession(engine::EngineState& state, const engine::Work& work, server::Job& job,
                                      const niels::v1::CreateSessionRequest& request, const Prepared& prepared);

// Background. A background request reads only what never changes once the model is loaded (its
// weights and config), so it runs on the compile worker (compile_worker.h: bounded, fair per uid,
// cancellable), never on an IO thread nor the engine thread, and is answered from there: the
// engine never sees it and no generation waits for it.
struct BackgroundContext {
  const loaders::Model* model = nullptr;          // immutable while the Service lives
  WeightStatsCache* weight_stats_cache = nullptr;  // thread-safe
};

// WeightStats (weight_stats.cc; proto/PROTOCOL.md, "Weight statistics"): the statistics of the
// tensors the request's names select, from the cache or computed one tensor at a time.
// INVALID_ARGUMENT naming the field for no names, a name beyond the budgets (weight_stats_names,
// weight_stats_name_bytes), a pattern that matches nothing, or a selection beyond
// weight_stats_tensors or weight_stats_elements; UNAVAILABLE when the weight file was modified in
// place; CANCELLED when `cancelled` turns true (polled between chunks of 65536 values).
HandlerResult HandleWeightStats(const BackgroundContext& context, const niels::v1::WeightStatsRequest& request,
                                const CompileCancelled& cancelled);
// Whether a selection of `tensors` tensors of `elements` elements in all is within the budgets
// weight_stats_tensors and weight_stats_elements; INVALID_ARGUMENT naming weight_stats.names and
// the budget otherwise (counted as its refusal).
common::Status CheckWeightStatsSelection(uint64_t tensors, uint64_t elements);

}  // namespace niels::daemon::handlers
