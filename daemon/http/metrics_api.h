#pragma once
// GET /metrics: Prometheus's text format (version 0.0.4) of nielsd's Stats (sessions, KV blocks,
// prefix-cache hits, tokens, queue depth, running rows, stored sessions, budget refusals) and of the
// HTTP front's own counters (requests by endpoint and status, open HTTP connections) and latency
// histograms by endpoint (time to first token, per-token latency; buckets kLatencyBuckets, cumulative
// as the format requires, then +Inf, _sum and _count). Every metric is prefixed nielsd_.

#include <cstddef>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/http_counters.h"

namespace niels::daemon::http {

// The exposition text (pure; tested and fuzzed through the handler).
std::string MetricsText(const niels::v1::StatsResponse& stats, const HttpCounters& counters,
                        size_t http_connections);

boost::asio::awaitable<void> HandleMetrics(Exchange& exchange, const HttpCounters& counters,
                                           size_t http_connections);

}  // namespace niels::daemon::http
