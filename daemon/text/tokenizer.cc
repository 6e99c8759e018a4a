#include "daemon/text/tokenizer.h"

#include <algorithm>

namespace niels::daemon::text {

bool OverlapsAny(std::span<const TextRange> ranges, size_t begin, size_t end) {
  // The first range that ends after `begin`: the only one that can overlap [begin, end).
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                   [](size_t at, const TextRange& range) { return at < range.end; });
  return it != ranges.end() && it->begin < end && begin < end;
}

}  // namespace niels::daemon::text
