#pragma once
// ActivationProbe: the activation statistics of one Generate (proto/PROTOCOL.md, "Activation
// statistics"): an observer of the forward pass's hook sites (daemon/model/hook_sites.h) for the
// request's rows that computes, per observed position and site, the statistics of that vector
// (model/tensor_statistics.h), and per site the statistics over every observed position's values.
//
// Per position: ComputeStatistics of the vector, compact or full, queued until TakePositions().
// Aggregated, compact: the positions' counts, means, squared deviations (Chan et al.'s pairwise
// combination, in double), extremes and sums of squares combined as each position arrives, so it
// holds a few numbers per site; full: every observed value of the site is kept (the percentiles
// are exact order statistics), at most the memory the request's budget allowed (the handler checks
// sites x positions x widths before the first token), and computed at Aggregates().
//
// Engine thread only (the forward step calls Observe on the thread that runs it).

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/model/hook_sites.h"
#include "daemon/model/tensor_statistics.h"

namespace niels::daemon::engine {

struct ProbeOptions {
  model::HookSelection sites;
  bool full = false;       // full statistics, else compact
  bool per_token = false;  // the statistics of each observed position's vector
  bool aggregate = false;  // the statistics over all observed positions, per site
  // A site's observations past this many are left out (counted in left_out()); 0: no cap. The
  // handler sets the positions its budgets allowed, so nothing grows past them.
  int64_t max_positions = 0;
};

struct PositionStatistics {
  model::HookSite site;
  int64_t layer;     // -1 for ln_final.hook_normalized
  int64_t position;  // in the sequence
  int64_t width;     // the vector's length
  model::TensorStatistics statistics;
};

struct SiteStatistics {
  model::HookSite site;
  int64_t layer;
  int64_t positions;  // observed
  int64_t width;
  model::TensorStatistics statistics;  // over positions x width values
};

class ActivationProbe final : public model::ActivationObserver {
 public:
  explicit ActivationProbe(ProbeOptions options);

  const model::HookSelection& sites() const override { return options_.sites; }
  void Observe(model::HookSite site, int64_t layer, int64_t position, std::span<const float> values) override;

  const ProbeOptions& options() const { return options_; }
  // The per-position statistics observed since the last call, position by position, each position's
  // sites in forward order (whatever steps computed them).
  std::vector<PositionStatistics> TakePositions();
  // Per selected site in forward order: the statistics over every observed position (sites never
  // observed: none).
  std::vector<SiteStatistics> Aggregates() const;
  // Observations left out by max_positions.
  int64_t left_out() const { return left_out_; }

 private:
  struct Aggregate {
    int64_t positions = 0, width = 0, count = 0, nonfinite = 0;
    double mean = 0, m2 = 0, squares = 0, min = 0, max = 0;
    std::vector<float> values;  // full: every observed value
  };
  ProbeOptions options_;
  std::vector<PositionStatistics> pending_;
  std::vector<Aggregate> aggregates_;  // by HookSelection::Index
  std::vector<int64_t> observed_;      // by HookSelection::Index: observations kept
  int64_t left_out_ = 0;
};

}  // namespace niels::daemon::engine
