// Generate: raw generation with the session as the cache (proto/PROTOCOL.md): input ids appended
// and processed first, then up to max_new_tokens sampled; per-step logprobs, alternatives and the
// attention trace when asked; streamed as events when asked.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/defaults.h"
#include "daemon/engine/generate_turn.h"
#include "daemon/engine/stop_string_rule.h"
#include "daemon/handlers/constraint.h"
#include "daemon/text/text_stream.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/probes.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

// INVALID_ARGUMENT when an attention trace of this request could outgrow one response: every
// step's row is heads x length floats, all of them in the final response (streamed or not); the
// context bounds the length.
Status CheckTraceFits(const model::ModelConfig& config, int32_t max_new_tokens) {
  const uint64_t trace_bytes = uint64_t{4} * static_cast<uint64_t>(config.heads) *
                               static_cast<uint64_t>(config.context) * static_cast<uint64_t>(max_new_tokens);
  if (trace_bytes <= common::kMaxResponseBytes / 2) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "an attention trace of {} tokens may need {} bytes, more than a response holds ({} bytes); "
      "ask for at most {} new tokens with trace_layer",
      max_new_tokens, trace_bytes, common::kMaxResponseBytes,
      common::kMaxResponseBytes / 2 / (uint64_t{4} * config.heads * config.context)));
}

StatusOr<engine::GenerateTurnArgs> GenerateArgs(const engine::EngineState& state, const v1::GenerateRequest& request,
                                                const Prepared& prepared) {
  const model::ModelConfig& config = state.config();
  engine::GenerateTurnArgs args;
  args.session_id = request.session_id();
  args.input.assign(request.input_ids().begin(), request.input_ids().end());
  NIELS_RETURN_IF_ERROR(CheckIds(args.input, config.vocab_size, "input_ids"));
  engine::GenerateOptions& options = args.options;
  options.max_new_tokens = request.has_max_new_tokens() ? request.max_new_tokens() : common::kDefaultMaxNewTokens;
  if (options.max_new_tokens < 0 || options.max_new_tokens > kMaxNewTokensLimit) {
    return Status::InvalidArgument(
        fmt::format("max_new_tokens = {} must be in [0, {}]", options.max_new_tokens, kMaxNewTokensLimit));
  }
  options.use_kv_cache = !request.has_use_kv_cache() || request.use_kv_cache();
  StatusOr<sampling::SamplingParams> sampling = SamplingFromProto(request.sampling(), config.vocab_size, {});
  if (!sampling.ok()) return sampling.status();
  options.sampling = std::move(sampling).value();
  options.stop_ids.assign(request.stop_ids().begin(), request.stop_ids().end());
  NIELS_RETURN_IF_ERROR(CheckStopIds(options.stop_ids, config.vocab_size));
  if (options.stop_ids.empty()) {
    options.stop_ids = state.model->stop_ids;  // the model's own
    NIELS_RETURN_IF_ERROR(CheckIds(options.stop_ids, config.vocab_size, "stop_ids"));
  }
  NIELS_RETURN_IF_ERROR(
      CheckStepAlternatives(request.top_logprobs(), request.sampled_top_logprobs(), options.max_new_tokens));
  options.want_logprobs = request.want_logprobs();
  options.top_logprobs = request.top_logprobs();
  options.sampled_top_logprobs = request.sampled_top_logprobs();
  if (request.has_trace_layer()) {
    if (request.trace_layer() < 0 || request.trace_layer() >= config.layers) {
      return Status::InvalidArgument(
          fmt::format("trace_layer = {} must be in [0, {})", request.trace_layer(), config.layers));
    }
    if (!options.use_kv_cache) return Status::InvalidArgument("trace_layer needs the cached path (use_kv_cache)");
    NIELS_RETURN_IF_ERROR(CheckTraceFits(config, options.max_new_tokens));
    options.trace_layer = request.trace_layer();
  }
  StatusOr<std::vector<std::string>> stops = StopStringsFromProto(request.stop_strings());
  if (!stops.ok()) return stops.status();
  if (!stops->empty()) {
    if (prepared.constraint != nullptr) {
      return Status::InvalidArgument("stop_strings cannot be combined with a constraint: constrained output ends where its grammar does");
    }
    options.text_stop = std::make_shared<engine::StopStringRule>(state.tokenizer(), std::move(stops).value());
  }
  if (prepared.constraint != nullptr) {
    if (options.max_new_tokens < 1) return Status::InvalidArgument("a constraint needs max_new_tokens >= 1");
    NIELS_RETURN_IF_ERROR(CheckConstraintUsable(state, options.sampling, options.stop_ids));
    options.constraint = {prepared.constraint, state.constraint_vocabulary, {}};
  }
  return args;
}

}  // namespace

bool GenerateCompiles(const v1::GenerateRequest& request) {
  return ConstraintCompilesText(request.has_constraint(), request.constraint());
}

StatusOr<Prepared> PrepareGenerate(const v1::GenerateRequest& request, const PrepareContext& /*context*/,
                                   const CompileCancelled& cancelled) {
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> constraint =
      CompileConstraint(request.has_constraint(), request.constraint(), cancelled);
  if (!constraint.ok()) return constraint.status();
  return Prepared{std::move(constraint).value()};
}

engine::TurnResult StartGenerate(engine::EngineState& state, const engine::Work& work, server::Job& job,
                                 const v1::GenerateRequest& request, const Prepared& prepared) {
  StatusOr<engine::GenerateTurnArgs> args = GenerateArgs(state, request, prepared);
  if (!args.ok()) return args.status();
  // Activation probes: every position this request may compute, bounded before any is.
  std::shared_ptr<engine::ActivationProbe> probe;
  if (request.has_probes()) {
    if (!args->options.use_kv_cache) return Status::InvalidArgument("probes need the cached path (use_kv_cache)");
    if (args->options.trace_layer >= 0) return Status::InvalidArgument("probes cannot be combined with trace_layer");
    // The input, the new ids (the last one's position is computed only by a later request), and the
    // session's positions its cache no longer holds (recomputed first).
    uint64_t positions = args->input.size() + static_cast<uint64_t>(args->options.max_new_tokens);
    StatusOr<sessions::Session*> session = state.sessions.Find(args->session_id, work.owner);
    if (session.ok()) positions += static_cast<uint64_t>((*session)->length() - (*session)->cached_tokens());
    positions = std::min(positions, static_cast<uint64_t>(state.config().context));
    StatusOr<engine::ProbeOptions> probe_options = ProbeFromProto(request.probes(), state.config(), positions);
    if (!probe_options.ok()) return probe_options.status();
    probe = std::make_shared<engine::ActivationProbe>(std::move(probe_options).value());
    args->options.observer = probe;
  }
  const bool per_token_probe = probe != nullptr && probe->options().per_token;
  const bool full_probe = probe != nullptr && probe->options().full;
  // Per-position statistics collected for the final response (and streamed with each event).
  auto activations = std::make_shared<std::vector<v1::ActivationStats>>();
  const auto take_activations = [probe, activations, full_probe]() {
    std::vector<v1::ActivationStats> taken;
    for (const engine::PositionStatistics& p : probe->TakePositions()) taken.push_back(PositionToProto(p, full_probe));
    activations->insert(activations->end(), taken.begin(), taken.end());
    return taken;
  };
  const text::Tokenizer& tokenizer = state.tokenizer();
  const engine::GenerateOptions& options = args->options;
  const bool want_steps = options.want_logprobs || options.top_logprobs > 0 || options.sampled_top_logprobs > 0 ||
                          options.trace_layer >= 0;
  const bool stream = request.stream();
  // With stop strings, streamed text is what the rule lets a stream show (never past a possible
  // match); it is fed each id before the id's event.
  auto stop = std::static_pointer_cast<engine::StopStringRule>(options.text_stop);
  // Steps collected for the final response (and streamed with each event when streaming).
  auto steps = std::make_shared<std::vector<v1::StepInfo>>();
  engine::TurnCallbacks callbacks;
  if (stream || want_steps || per_token_probe) {
    callbacks.on_token = [&job, &tokenizer, steps, stream, want_steps, stop, per_token_probe, take_activations,
                          text = std::make_shared<text::TextStream>(tokenizer)](const engine::StepEvent& event) {
      if (want_steps) steps->push_back(StepToProto(event, tokenizer));
      std::vector<v1::ActivationStats> taken;
      if (per_token_probe) taken = take_activations();
      if (!stream) return;
      v1::TokenEvent token;
      token.set_id(event.id);
      token.set_index(event.index);
      if (want_steps) *token.mutable_step() = steps->back();
      for (v1::ActivationStats& a : taken) *token.add_activations() = std::move(a);
      token.set_text(stop != nullptr ? stop->TakeShown() : text->Add(event.id, event.last));
      job.SendEvent(std::move(token));
    };
  }
  callbacks.on_commit = [&job, steps, stop, probe, activations, per_token_probe, full_probe,
                         take_activations](const engine::TurnOutcome& outcome) {
    const engine::GenerateResult& result = outcome.generation;
    v1::Response response;
    v1::GenerateResponse& generate = *response.mutable_generate();
    generate.mutable_new_ids()->Add(result.new_tokens.begin(), result.new_tokens.end());
    generate.set_stop_reason(StopReasonToProto(result.stop_reason));
    if (result.stop_reason == engine::StopReason::kStopString && stop != nullptr) {
      generate.set_stop_string(stop->matched().value_or(""));
      // The steps of the ids rolled back with the match are not part of the result.
      if (steps->size() > result.new_tokens.size()) steps->resize(result.new_tokens.size());
    }
    generate.set_session_length(outcome.session.length());
    for (v1::StepInfo& step : *steps) *generate.add_steps() = std::move(step);
    if (per_token_probe) take_activations();  // the positions no event carried (max_new_tokens = 0)
    for (v1::ActivationStats& a : *activations) *generate.add_activations() = std::move(a);
    if (probe != nullptr) {
      for (const engine::SiteStatistics& total : probe->Aggregates()) {
        *generate.add_activation_totals() = TotalToProto(total, full_probe);
      }
    }
    *generate.mutable_stats() = StatsToProto(result, outcome.queue_ms);
    job.Finish(std::move(response));
  };
  return engine::StartGenerateTurn(state, work, std::move(args).value(), std::move(callbacks));
}

}  // namespace niels::daemon::handlers
