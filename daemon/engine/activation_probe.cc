#include "daemon/engine/activation_probe.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace niels::daemon::engine {

ActivationProbe::ActivationProbe(ProbeOptions options) : options_(std::move(options)) {
  const auto sites = static_cast<size_t>(model::HookSiteCount(options_.sites.layers()));
  if (options_.aggregate) aggregates_.resize(sites);
  observed_.resize(sites);
}

void ActivationProbe::Observe(model::HookSite site, int64_t layer, int64_t position, std::span<const float> values) {
  const auto width = static_cast<int64_t>(values.size());
  int64_t& observed = observed_[options_.sites.Index(site, layer)];
  if (options_.max_positions > 0 && observed >= options_.max_positions) {
    ++left_out_;
    return;
  }
  ++observed;
  model::TensorStatistics own;
  const bool need_own = options_.per_token || (options_.aggregate && !options_.full);
  if (need_own) own = model::ComputeStatistics(values, options_.full && options_.per_token);
  if (options_.aggregate) {
    Aggregate& a = aggregates_[options_.sites.Index(site, layer)];
    ++a.positions;
    a.width = width;
    if (options_.full) {
      a.values.insert(a.values.end(), values.begin(), values.end());
    } else if (own.count > 0) {  // Chan et al.: combine (count, mean, M2) of the two parts
      const double n_a = static_cast<double>(a.count), n_b = static_cast<double>(own.count), n = n_a + n_b;
      const double delta = own.mean - a.mean;
      a.mean = a.count == 0 ? own.mean : a.mean + delta * (n_b / n);
      a.m2 += own.std * own.std * n_b + delta * delta * (n_a * n_b / n);
      a.squares += own.l2_norm * own.l2_norm;
      a.min = a.count == 0 ? own.min : std::min(a.min, own.min);
      a.max = a.count == 0 ? own.max : std::max(a.max, own.max);
      a.count += own.count;
    }
    a.nonfinite += options_.full ? 0 : own.nonfinite;
  }
  if (options_.per_token) pending_.push_back({site, layer, position, width, std::move(own)});
}

std::vector<PositionStatistics> ActivationProbe::TakePositions() {
  // A step observes site by site, each site's positions in order; how a prefill was split into steps
  // must not show, so position by position (stable: each position's sites stay in forward order, all
  // of them from the one step that computed it).
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const PositionStatistics& a, const PositionStatistics& b) { return a.position < b.position; });
  return std::exchange(pending_, {});
}

std::vector<SiteStatistics> ActivationProbe::Aggregates() const {
  std::vector<SiteStatistics> out;
  if (!options_.aggregate) return out;
  options_.sites.ForEach([&](model::HookSite site, int64_t layer) {
    const Aggregate& a = aggregates_[options_.sites.Index(site, layer)];
    if (a.positions == 0) return;
    SiteStatistics s{site, layer, a.positions, a.width, {}};
    if (options_.full) {
      s.statistics = model::ComputeStatistics(a.values, true);
    } else {
      s.statistics.count = a.count;
      s.statistics.nonfinite = a.nonfinite;
      if (a.count > 0) {
        s.statistics.mean = a.mean;
        s.statistics.std = std::sqrt(a.m2 / static_cast<double>(a.count));
        s.statistics.min = a.min;
        s.statistics.max = a.max;
        s.statistics.l2_norm = std::sqrt(a.squares);
      }
    }
    out.push_back(std::move(s));
  });
  return out;
}

}  // namespace niels::daemon::engine
