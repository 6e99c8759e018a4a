#include "daemon/sampling/token_id_set.h"

#include <algorithm>

namespace niels::daemon::sampling {

TokenIdSet::TokenIdSet(std::span<const int32_t> ids) : ids_(ids.begin(), ids.end()) {
  if (!std::is_sorted(ids_.begin(), ids_.end())) std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
  ids_.shrink_to_fit();
}

bool TokenIdSet::Contains(int32_t id) const { return std::binary_search(ids_.begin(), ids_.end(), id); }

}  // namespace niels::daemon::sampling
