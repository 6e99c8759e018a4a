#pragma once
// WeightStatsCache: the statistics already computed for a model's tensors (weights are immutable,
// so an entry never goes stale). Keyed by the tensor's name (Weights::ForEach's) and compact or
// full; a full entry also answers a compact lookup.
//
// Bounded: at most kWeightStatsCacheEntries entries (each under 1 KiB: two per tensor of any model
// the daemon serves fit); when full, it is emptied before the next insert.
//
// Threading: every method is thread-safe (one mutex, never held while computing).

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "daemon/model/tensor_statistics.h"

namespace niels::daemon::handlers {

inline constexpr size_t kWeightStatsCacheEntries = 8192;

class WeightStatsCache {
 public:
  // The cached statistics of `tensor`: the full ones when there are; for a compact lookup, the full
  // ones too when only those are cached. nullopt when not cached.
  std::optional<model::TensorStatistics> Find(const std::string& tensor, bool full) const;
  // Keeps `statistics` (full or compact, as statistics.full says) for `tensor`.
  void Insert(const std::string& tensor, const model::TensorStatistics& statistics);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  // Guarded by mutex_: by (tensor, full).
  std::unordered_map<std::string, model::TensorStatistics> compact_, full_;
};

}  // namespace niels::daemon::handlers
