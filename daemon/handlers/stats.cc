// Stats: how busy nielsd is (sessions, KV memory, counters, the scheduler's figures).
#include <chrono>

#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

// `connections` and `connections_refused_total` are left 0: only the server knows them (the
// dispatcher fills them in on the way out).
HandlerResult HandleStats(engine::EngineState& state, HandlerContext&, const v1::StatsRequest&) {
  v1::Response response;
  v1::StatsResponse& stats = *response.mutable_stats();
  stats.set_sessions(static_cast<uint32_t>(state.sessions.size()));
  stats.set_kv_bytes(state.sessions.kv_bytes());
  stats.set_requests_total(state.requests_total);
  stats.set_tokens_generated_total(state.tokens_generated_total);
  stats.set_tokens_prefilled_total(state.tokens_prefilled_total);
  stats.set_sessions_expired_total(state.sessions_expired_total);
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

}  // namespace niels::daemon::handlers
