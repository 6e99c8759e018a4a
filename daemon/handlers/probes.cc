#include "daemon/handlers/probes.h"

#include <fmt/format.h>

#include "common/budgets.h"
#include "daemon/model/hook_sites.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

common::StatusOr<engine::ProbeOptions> ProbeFromProto(const v1::ProbeSpec& spec, const model::ModelConfig& config,
                                                     uint64_t positions) {
  if (spec.sites().empty()) {
    return Status::InvalidArgument(
        "probes.sites: name at least one hook site (e.g. blocks.0.hook_resid_post, blocks.*.hook_resid_post)");
  }
  if (!spec.per_token() && !spec.aggregate()) {
    return Status::InvalidArgument("probes: ask for per_token or aggregate statistics (or both)");
  }
  const std::vector<std::string> patterns(spec.sites().begin(), spec.sites().end());
  common::StatusOr<model::HookSelection> sites = model::ParseHookSites(patterns, config.layers, "probes.sites");
  if (!sites.ok()) return sites.status();
  const uint64_t count = static_cast<uint64_t>(sites->count());
  const uint64_t units = spec.full() ? kFullStatisticUnits : kCompactStatisticUnits;
  const uint64_t statistics = units * ((spec.per_token() ? count * positions : 0) + (spec.aggregate() ? count : 0));
  if (statistics > common::kProbeStatisticsLimit) {
    return common::Refuse(common::BudgetId::kProbeStatistics,
                          fmt::format("probes: {} sites x {} positions make {} units of statistics (the limit is {}); "
                                      "select fewer sites, ask for fewer new tokens or for compact statistics",
                                      count, positions, statistics, common::kProbeStatisticsLimit));
  }
  if (spec.aggregate() && spec.full()) {
    uint64_t width = 0;  // the selected sites' widths
    sites->ForEach([&](model::HookSite site, int64_t) {
      width += static_cast<uint64_t>(site == model::HookSite::kMlpPost ? config.d_ff : config.width);
    });
    if (width * positions > common::kProbeTotalValuesLimit) {
      return common::Refuse(common::BudgetId::kProbeTotalValues,
                            fmt::format("probes: full totals would keep {} values (the limit is {}); select fewer "
                                        "sites, ask for fewer new tokens or for compact totals",
                                        width * positions, common::kProbeTotalValuesLimit));
    }
  }
  engine::ProbeOptions options;
  options.sites = std::move(sites).value();
  options.full = spec.full();
  options.per_token = spec.per_token();
  options.aggregate = spec.aggregate();
  options.max_positions = static_cast<int64_t>(positions);
  return options;
}

void StatisticsToProto(const model::TensorStatistics& s, bool full, v1::TensorStats& out) {
  out.set_nonfinite(static_cast<uint64_t>(s.nonfinite));
  out.set_mean(s.mean);
  out.set_std(s.std);
  out.set_min(s.min);
  out.set_max(s.max);
  out.set_l2_norm(s.l2_norm);
  if (!full) return;
  out.set_full(true);
  out.set_median(s.median);
  out.set_abs_mean(s.abs_mean);
  out.set_zeros_percent(s.zeros_percent);
  out.set_near_zero_percent(s.near_zero_percent);
  out.set_l1_norm(s.l1_norm);
  out.set_p5(s.percentiles[0]);
  out.set_p25(s.percentiles[1]);
  out.set_p50(s.percentiles[2]);
  out.set_p75(s.percentiles[3]);
  out.set_p95(s.percentiles[4]);
  v1::Histogram& histogram = *out.mutable_histogram();
  histogram.set_low(s.histogram_low);
  histogram.set_high(s.histogram_high);
  for (int64_t count : s.histogram) histogram.add_counts(static_cast<uint64_t>(count));
}

v1::ActivationStats PositionToProto(const engine::PositionStatistics& p, bool full) {
  v1::ActivationStats out;
  out.set_site(model::HookSiteName(p.site, p.layer));
  out.set_position(p.position);
  out.set_positions(1);
  v1::TensorStats& stats = *out.mutable_stats();
  stats.add_shape(p.width);
  stats.set_dtype("f32");
  stats.set_parameters(static_cast<uint64_t>(p.width));
  StatisticsToProto(p.statistics, full, stats);
  return out;
}

v1::ActivationStats TotalToProto(const engine::SiteStatistics& s, bool full) {
  v1::ActivationStats out;
  out.set_site(model::HookSiteName(s.site, s.layer));
  out.set_position(-1);
  out.set_positions(s.positions);
  v1::TensorStats& stats = *out.mutable_stats();
  stats.add_shape(s.positions);
  stats.add_shape(s.width);
  stats.set_dtype("f32");
  stats.set_parameters(static_cast<uint64_t>(s.positions * s.width));
  StatisticsToProto(s.statistics, full, stats);
  return out;
}

}  // namespace niels::daemon::handlers
