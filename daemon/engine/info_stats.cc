// Info and Stats: what the daemon serves and how busy it is.
#include <chrono>

#include "daemon/engine/engine_state.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;

HandlerResult HandleInfo(EngineState& state, JobContext& job, const v1::InfoRequest& request) {
  const model::ModelConfig& config = state.config();
  const model::SpecialTokens& special = state.tokenizer().special();
  v1::Response response;
  v1::InfoResponse& info = *response.mutable_info();
  info.set_model_name(config.name.empty() ? state.model->dir.filename().string() : config.name);
  info.set_model_path(state.model->dir.string());
  info.set_vocab_size(config.vocab_size);
  info.set_context(config.context);
  info.set_width(config.width);
  info.set_layers(config.layers);
  info.set_heads(config.heads);
  info.set_d_ff(config.d_ff);
  info.set_rope_theta(config.rope_theta);
  info.set_sys_id(special.sys);
  info.set_usr_id(special.usr);
  info.set_asst_id(special.asst);
  info.set_eot_id(special.eot);
  info.set_daemon_version(NIELSD_VERSION);
  info.set_protocol_version(1);
  info.set_max_frame_bytes(state.options.max_frame_bytes);
  info.set_max_sessions(state.sessions.max_sessions());
  info.set_kv_budget_bytes(state.sessions.kv_budget_bytes());
  info.set_default_system_prompt(state.options.default_system_prompt);
  if (const state::DurableStore* durable = state.sessions.durable_store()) {
    info.set_durable_sessions(true);
    info.set_session_ttl_s(durable->options().session_ttl_s);
    info.set_max_stored_sessions_per_uid(durable->options().max_stored_sessions_per_uid);
  }
  return response;
}

// `connections` is left 0: only the server knows it (it may fill it in on the way out).
HandlerResult HandleStats(EngineState& state, JobContext& job, const v1::StatsRequest& request) {
  v1::Response response;
  v1::StatsResponse& stats = *response.mutable_stats();
  stats.set_sessions(static_cast<uint32_t>(state.sessions.size()));
  stats.set_kv_bytes(state.sessions.kv_bytes());
  stats.set_requests_total(state.requests_total);
  stats.set_tokens_generated_total(state.tokens_generated_total);
  stats.set_tokens_prefilled_total(state.tokens_prefilled_total);
  stats.set_uptime_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - state.started).count());
  stats.set_queued_requests(state.queued_requests);
  stats.set_running_sequences(state.running_sequences);
  if (state.decode_steps > 0) {
    stats.set_mean_batch_size(static_cast<double>(state.decode_rows) / static_cast<double>(state.decode_steps));
  }
  if (state.busy_s > 0) stats.set_iterations_per_s(static_cast<double>(state.iterations) / state.busy_s);
  if (state::DurableStore* durable = state.sessions.durable_store()) {
    auto stored = durable->Count();
    if (stored.ok()) stats.set_stored_sessions(static_cast<uint32_t>(*stored));
    stats.set_kv_spill_bytes(durable->spill().used_bytes());
    stats.set_kv_spill_reads(state.sessions.durable_counters().spill_reads);
    stats.set_kv_spill_writes(state.sessions.durable_counters().spill_writes);
    stats.set_commits_total(durable->commits());
  }
  return response;
}

}  // namespace niels::daemon::engine
