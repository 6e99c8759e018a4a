#include "daemon/handlers/weight_stats_cache.h"

namespace niels::daemon::handlers {

std::optional<model::TensorStatistics> WeightStatsCache::Find(const std::string& tensor, bool full) const {
  std::lock_guard lock(mutex_);
  if (auto it = full_.find(tensor); it != full_.end()) return it->second;
  if (full) return std::nullopt;
  if (auto it = compact_.find(tensor); it != compact_.end()) return it->second;
  return std::nullopt;
}

void WeightStatsCache::Insert(const std::string& tensor, const model::TensorStatistics& statistics) {
  std::lock_guard lock(mutex_);
  if (compact_.size() + full_.size() >= kWeightStatsCacheEntries) {
    compact_.clear();
    full_.clear();
  }
  (statistics.full ? full_ : compact_)[tensor] = statistics;
}

size_t WeightStatsCache::size() const {
  std::lock_guard lock(mutex_);
  return compact_.size() + full_.size();
}

}  // namespace niels::daemon::handlers
