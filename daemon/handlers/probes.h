#pragma once
// Activation probes of a Generate (proto/PROTOCOL.md, "Activation statistics"): the ProbeSpec
// checked and turned into the engine's ProbeOptions, and the statistics turned into the wire's
// ActivationStats. Pure functions; any thread.

#include <cstdint>

#include "common/status.h"
#include "daemon/engine/activation_probe.h"
#include "daemon/model/config.h"
#include "daemon/model/tensor_statistics.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// A statistic's cost in the probe_statistics budget.
inline constexpr uint64_t kCompactStatisticUnits = 1;
inline constexpr uint64_t kFullStatisticUnits = 5;

// The probe of a request that may compute up to `positions` positions. INVALID_ARGUMENT naming
// the field: no sites ("probes.sites"), neither per_token nor aggregate ("probes"), the sites'
// own refusals (model::ParseHookSites, "probes.sites[i]"), and the budgets probe_statistics
// (sites x positions per token plus sites aggregated, in units) and probe_total_values (full totals:
// the sites' widths x positions). The options' max_positions is `positions`.
common::StatusOr<engine::ProbeOptions> ProbeFromProto(const niels::v1::ProbeSpec& spec,
                                                     const model::ModelConfig& config, uint64_t positions);

// The statistics into `out` (compact fields, and the full ones with `full`); no names or shape.
void StatisticsToProto(const model::TensorStatistics& s, bool full, niels::v1::TensorStats& out);
niels::v1::ActivationStats PositionToProto(const engine::PositionStatistics& p, bool full);
niels::v1::ActivationStats TotalToProto(const engine::SiteStatistics& s, bool full);

}  // namespace niels::daemon::handlers
