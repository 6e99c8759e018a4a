#pragma once
// KV spill of a session's cache (docs/ARCHITECTURE.md, "Durable sessions"): the bridge between
// model::KvCache and the spill file format (daemon/state/kv_spill_file.h), and KvSpiller, which
// decides when spilling pays off.
//
// A spill file is bound to the model (fingerprint and cache shape), to the KV dtype of the cache
// that wrote it (a file of another --kv-dtype is refused like any other mismatch) and to the exact
// token ids it covers, so a file that does not match the session's history now is refused and the cache is
// recomputed instead. Engine thread only (the cache belongs to a session).

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "common/status.h"
#include "daemon/model/config.h"
#include "daemon/model/kv_cache.h"
#include "daemon/sessions/session.h"
#include "daemon/state/durable_store.h"
#include "daemon/state/kv_spill_file.h"

namespace niels::daemon::sessions {

// The header a spill of the first `positions` of `tokens` from a cache of `kv_dtype` (f32 or f16)
// carries.
state::KvSpillHeader SpillHeader(const model::ModelConfig& config, kernels::Dtype kv_dtype,
                                 const std::string& model_fingerprint, std::span<const int32_t> tokens,
                                 int64_t positions);

// Writes every cached position of `cache` (covering tokens[0, cache.length())) to `path`. Returns
// the file's size. REQUIRES: cache.length() > 0 and <= tokens.size().
common::StatusOr<uint64_t> WriteKvSpill(model::KvCache& cache, std::span<const int32_t> tokens,
                                        const model::ModelConfig& config, const std::string& model_fingerprint,
                                        const std::filesystem::path& path);

// Fills the empty `cache` from the spill at `path`, which must cover exactly tokens[0, positions)
// and hold the dtype of the cache's pool. On any error (missing, damaged, another history, model or
// KV dtype) the cache is left empty.
// REQUIRES: cache.length() == 0, 0 < positions <= tokens.size().
common::Status ReadKvSpillInto(model::KvCache& cache, std::span<const int32_t> tokens, int64_t positions,
                               const model::ModelConfig& config, const std::string& model_fingerprint,
                               const std::filesystem::path& path);

// Counters of the spill side, for Stats.
struct SpillCounters {
  uint64_t spill_writes = 0;
  uint64_t spill_reads = 0;
  uint64_t spill_read_failures = 0;  // damaged or mismatched files, recomputed instead
};

// KvSpiller: when a session's KV cache leaves memory (evicted under the KV budget, or the session
// unloaded), writes it to the session's spill file first if reading it back is expected to be faster
// than recomputing it (both rates measured as the daemon runs: spill reads in bytes/s, prefills in
// tokens/s), and reads it back when the session is used again. Only with durable sessions (a
// DurableStore); without one it only drops caches. Engine thread only.
class KvSpiller {
 public:
  // `durable` (may be null: ephemeral sessions) must outlive the spiller.
  KvSpiller(const model::ModelConfig& config, kernels::Dtype kv_dtype, state::DurableStore* durable);
  KvSpiller(const KvSpiller&) = delete;
  KvSpiller& operator=(const KvSpiller&) = delete;

  // Writes the session's cache to its spill file when that pays off (durable only); then drops the
  // cache. The session's history stays.
  void SpillAndDropCache(Session& session);
  // Fills the session's empty cache from its spill file, when one exists and reading it is expected
  // to be faster than recomputing; a damaged or stale file is discarded (the caller then prefills as
  // usual). Call once the session's KV memory is reserved (KvBudget::Admit).
  void RestoreSpilledCache(Session& session);
  // The session's history changed (a committed turn): its spill file no longer matches.
  void Discard(const Session& session);
  // Records a measured prefill rate (tokens in `seconds`), the recompute side of the decision.
  void RecordPrefill(int64_t tokens, double seconds);

  const SpillCounters& counters() const { return counters_; }

 private:
  // Whether reading `bytes` back is expected to be faster than recomputing `tokens`.
  bool SpillPaysOff(uint64_t bytes, int64_t tokens) const;

  model::ModelConfig config_;
  kernels::Dtype kv_dtype_;
  state::DurableStore* durable_;
  SpillCounters counters_;
  double read_bytes_per_s_ = 0;      // measured spill reads (EWMA); 0 = not measured yet
  double prefill_tokens_per_s_ = 0;  // measured prefills (EWMA); 0 = not measured yet
};

}  // namespace niels::daemon::sessions
