// Generate: the raw form with the session as the cache (DESIGN.md section 6): input ids appended and
// processed first, then up to max_new_tokens sampled; per-step logprobs, alternatives and attention.
#include <fmt/format.h>

#include "common/frame.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/proto_convert.h"
#include "daemon/engine/text_stream.h"
#include "daemon/engine/turn_runner.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

struct GenerateArgs {
  std::vector<int32_t> input;
  GenerateOptions options;
  bool want_steps = false;
};

StatusOr<GenerateArgs> ValidateGenerate(const EngineState& state, const v1::GenerateRequest& request) {
  const model::ModelConfig& config = state.config();
  GenerateArgs args;
  GenerateOptions& options = args.options;
  args.input.assign(request.input_ids().begin(), request.input_ids().end());
  NIELS_RETURN_IF_ERROR(CheckIds(args.input, config.vocab_size, "input_ids"));
  options.max_new_tokens = request.has_max_new_tokens() ? request.max_new_tokens() : kDefaultMaxNewTokens;
  if (options.max_new_tokens < 0 || options.max_new_tokens > kMaxNewTokensLimit) {
    return Status::InvalidArgument(
        fmt::format("max_new_tokens = {} must be in [0, {}]", options.max_new_tokens, kMaxNewTokensLimit));
  }
  options.use_kv_cache = !request.has_use_kv_cache() || request.use_kv_cache();
  StatusOr<model::SamplingParams> sampling = SamplingFromProto(request.sampling(), config.vocab_size, {});
  if (!sampling.ok()) return sampling.status();
  options.sampling = std::move(sampling).value();
  options.stop_ids.assign(request.stop_ids().begin(), request.stop_ids().end());
  if (options.stop_ids.empty()) options.stop_ids = {state.tokenizer().special().eot};
  NIELS_RETURN_IF_ERROR(CheckIds(options.stop_ids, config.vocab_size, "stop_ids"));
  if (request.top_logprobs() < 0 || request.top_logprobs() > kMaxTopLogprobs) {
    return Status::InvalidArgument(
        fmt::format("top_logprobs = {} must be in [0, {}]", request.top_logprobs(), kMaxTopLogprobs));
  }
  options.want_logprobs = request.want_logprobs();
  options.top_logprobs = request.top_logprobs();
  if (request.has_trace_layer()) {
    if (request.trace_layer() < 0 || request.trace_layer() >= config.layers) {
      return Status::InvalidArgument(
          fmt::format("trace_layer = {} must be in [0, {})", request.trace_layer(), config.layers));
    }
    if (!options.use_kv_cache) return Status::InvalidArgument("trace_layer needs the cached path (use_kv_cache)");
    // Every step's row is heads x length floats, all of them in the final response (streamed or
    // not); bound it, with the context as the longest length, so the reply fits one response.
    const uint64_t trace_bytes = uint64_t{4} * static_cast<uint64_t>(config.heads) *
                                 static_cast<uint64_t>(config.context) *
                                 static_cast<uint64_t>(options.max_new_tokens);
    if (trace_bytes > common::kMaxResponseBytes / 2) {
      return Status::InvalidArgument(fmt::format(
          "an attention trace of {} tokens may need {} bytes, more than a response holds ({} bytes); "
          "ask for at most {} new tokens with trace_layer",
          options.max_new_tokens, trace_bytes, common::kMaxResponseBytes,
          common::kMaxResponseBytes / 2 / (uint64_t{4} * config.heads * config.context)));
    }
    options.trace_layer = request.trace_layer();
  }
  args.want_steps = options.want_logprobs || options.top_logprobs > 0 || options.trace_layer >= 0;
  return args;
}

// INVALID_ARGUMENT when the input cannot be appended to the session.
Status CheckFits(const Session& session, const GenerateArgs& args, int64_t context) {
  const int64_t length = session.length() + static_cast<int64_t>(args.input.size());
  if (length > context) {
    return Status::InvalidArgument(fmt::format(
        "the session has {} tokens; {} more input ids would exceed the model's context of {} tokens",
        session.length(), args.input.size(), context));
  }
  if (length == 0 && args.options.max_new_tokens > 0) {
    return Status::InvalidArgument("the session is empty and input_ids is empty: nothing to continue from");
  }
  return Status::Ok();
}

}  // namespace

HandlerResult HandleGenerate(EngineState& state, JobContext& job, const v1::GenerateRequest& request) {
  StatusOr<GenerateArgs> args = ValidateGenerate(state, request);
  if (!args.ok()) return args.status();
  StatusOr<Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  Session& session = **found;
  NIELS_RETURN_IF_ERROR(CheckFits(session, *args, state.config().context));

  Session::Snapshot snapshot = session.TakeSnapshot();
  const GenerateOptions& options = args->options;
  // Continuing a fully cached session recomputes its last position (generator.h): keep a copy so a
  // cancel restores the cache length exactly.
  if (options.use_kv_cache && args->input.empty() && options.max_new_tokens > 0 &&
      session.cached_tokens() == session.length()) {
    session.StashCacheCopy(snapshot);
  }
  const int64_t final_length = session.length() + static_cast<int64_t>(args->input.size()) + options.max_new_tokens;
  if (Status ready = PrepareCache(state, session, snapshot, options.use_kv_cache, final_length); !ready.ok()) {
    session.Restore(std::move(snapshot));
    return ready;
  }

  const model::Tokenizer& tokenizer = state.tokenizer();
  std::vector<v1::StepInfo> steps;
  TextStream text(tokenizer);
  const bool stream = request.stream();
  const bool want_steps = args->want_steps;
  EventBuilder on_event = [&](const StepEvent& event, bool last) {
    v1::TokenEvent token;
    token.set_id(event.id);
    token.set_index(event.index);
    if (want_steps) {
      steps.push_back(StepToProto(event, tokenizer));
      if (stream) *token.mutable_step() = steps.back();
    }
    if (stream) token.set_text(text.Add(event.id, last));
    return token;
  };
  // Without streaming the builder still runs (to collect steps) but nothing is sent.
  EventBuilder stream_event = stream ? on_event : EventBuilder();
  GenerateOptions run_options = options;
  if (!stream && want_steps) {
    run_options.on_token = [&](const StepEvent& event) { on_event(event, false); };
  }
  StatusOr<GenerateResult> result =
      RunAtomically(state, job, session, snapshot, args->input, std::move(run_options), stream_event);
  if (!result.ok()) return result.status();

  v1::Response response;
  v1::GenerateResponse& generate = *response.mutable_generate();
  generate.mutable_new_ids()->Add(result->new_tokens.begin(), result->new_tokens.end());
  generate.set_stop_reason(StopReasonToProto(result->stop_reason));
  generate.set_session_length(session.length());
  for (v1::StepInfo& step : steps) *generate.add_steps() = std::move(step);
  *generate.mutable_stats() = StatsToProto(*result, options.use_kv_cache, job.queue_ms());
  return response;
}

}  // namespace niels::daemon::engine
