#include "daemon/text/stop_strings.h"

#include <algorithm>
#include <utility>

namespace niels::daemon::text {

StopStringScanner::StopStringScanner(std::vector<std::string> stops) : stops_(std::move(stops)) {
  failure_.resize(stops_.size());
  state_.assign(stops_.size(), 0);
  for (size_t s = 0; s < stops_.size(); ++s) {
    const std::string& p = stops_[s];
    std::vector<uint32_t>& f = failure_[s];
    f.assign(p.size() + 1, 0);  // f[k]: longest proper border of p[0, k)
    uint32_t k = 0;
    for (size_t i = 1; i < p.size(); ++i) {
      while (k > 0 && p[i] != p[k]) k = f[k];
      if (p[i] == p[k]) ++k;
      f[i + 1] = k;
    }
  }
}

std::optional<StopMatch> StopStringScanner::Feed(std::string_view bytes) {
  if (match_) return match_;
  for (const char c : bytes) {
    ++size_;
    std::optional<StopMatch> found;
    for (size_t s = 0; s < stops_.size(); ++s) {
      const std::string& p = stops_[s];
      uint32_t k = state_[s];
      ++steps_;
      while (k > 0 && p[k] != c) {
        k = failure_[s][k];
        ++steps_;
      }
      if (p[k] == c) ++k;
      state_[s] = k;
      if (k == p.size()) {
        const size_t start = size_ - p.size();
        if (!found || start < found->start) found = StopMatch{s, start};
      }
    }
    if (found) {
      match_ = found;
      return match_;
    }
  }
  return std::nullopt;
}

size_t StopStringScanner::held_back() const {
  if (match_) return 0;
  uint32_t most = 0;
  for (uint32_t k : state_) most = std::max(most, k);
  return most;
}

}  // namespace niels::daemon::text
