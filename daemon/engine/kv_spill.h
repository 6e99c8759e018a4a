#pragma once
// KV spill of a session's cache (docs/ARCHITECTURE.md, "Durable sessions"): the bridge between
// model::KvCache and the torch-free spill file format (daemon/state/kv_spill_file.h).
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
#include "daemon/state/kv_spill_file.h"

namespace niels::daemon::engine {

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

}  // namespace niels::daemon::engine
