// Stats: how busy nielsd is (sessions, KV memory, counters, the scheduler's figures).
#include <chrono>

#include "common/budgets.h"

#include "daemon/handlers/handlers.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

namespace {

// The block pool's figures and how many prompt tokens its prefix index served.
void FillKvPoolStats(const engine::EngineState& state, v1::StatsResponse& stats) {
  const model::KvPool& pool = state.kv.pool();
  stats.set_kv_blocks_total(static_cast<uint32_t>(pool.capacity()));
  stats.set_kv_blocks_used(static_cast<uint32_t>(pool.used()));
  stats.set_kv_blocks_shared(static_cast<uint32_t>(pool.shared()));
  stats.set_kv_blocks_cached(static_cast<uint32_t>(pool.cached()));
  stats.set_kv_block_bytes(pool.block_bytes());
  stats.set_kv_block_tokens(static_cast<uint32_t>(model::KvPool::kBlockTokens));
  stats.set_prefix_hit_tokens(pool.hit_tokens());
  const uint64_t served = pool.hit_tokens() + state.tokens_prefilled_total;
  if (served > 0) stats.set_prefix_hit_rate(static_cast<double>(pool.hit_tokens()) / static_cast<double>(served));
  stats.set_kv_blocks_evicted(pool.evictions());
  stats.set_kv_caches_dropped(state.kv.evictions());
}

}  // namespace

// `connections` and `connections_refused_total` are left 0: only the server knows them (the
// dispatcher fills them in on the way out).
HandlerResult HandleStats(engine::EngineState& state, server::Job&, const v1::StatsRequest&) {
  v1::Response response;
  v1::StatsResponse& stats = *response.mutable_stats();
  stats.set_sessions(static_cast<uint32_t>(state.sessions.size()));
  stats.set_kv_bytes(state.kv.used_bytes());
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
  FillKvPoolStats(state, stats);
  for (const common::Budget& budget : common::Budgets()) {
    v1::BudgetRefusals& refusals = *stats.add_budget_refusals();
    refusals.set_name(std::string(budget.name));
    refusals.set_refused(common::Refusals(budget.id));
  }
  if (state::DurableStore* durable = state.sessions.durable_store()) {
    auto stored = durable->Count();
    if (stored.ok()) stats.set_stored_sessions(static_cast<uint32_t>(*stored));
    stats.set_kv_spill_bytes(durable->spill().used_bytes());
    stats.set_kv_spill_reads(state.spiller.counters().spill_reads);
    stats.set_kv_spill_writes(state.spiller.counters().spill_writes);
    stats.set_commits_total(durable->commits());
  }
  return response;
}

}  // namespace niels::daemon::handlers
