#include "daemon/http/metrics_api.h"

#include <fmt/format.h>

#include "common/wire_status.h"

namespace niels::daemon::http {
namespace {

void Metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP nielsd_{} {}\n# TYPE nielsd_{} {}\nnielsd_{} {}\n", name, help, name,
                 type, name, value);
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A histogram family: per endpoint its cumulative buckets, +Inf, _sum and _count.
void Histogram(std::string& out, const char* name, const char* help,
               const std::map<std::string, LatencyHistogram>& by_endpoint) {
  fmt::format_to(std::back_inserter(out), "# HELP nielsd_{} {}\n# TYPE nielsd_{} histogram\n", name, help, name);
  for (const auto& [endpoint, histogram] : by_endpoint) {
    const std::string label = LabelValue(endpoint);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cumulative += histogram.counts[i];
      fmt::format_to(std::back_inserter(out), "nielsd_{}_bucket{{endpoint=\"{}\",le=\"{}\"}} {}\n", name, label,
                     kLatencyBuckets[i], cumulative);
    }
    fmt::format_to(std::back_inserter(out), "nielsd_{}_bucket{{endpoint=\"{}\",le=\"+Inf\"}} {}\n", name, label,
                   histogram.count);
    fmt::format_to(std::back_inserter(out), "nielsd_{}_sum{{endpoint=\"{}\"}} {}\n", name, label, histogram.sum);
    fmt::format_to(std::back_inserter(out), "nielsd_{}_count{{endpoint=\"{}\"}} {}\n", name, label, histogram.count);
  }
}

}  // namespace

std::string MetricsText(const niels::v1::StatsResponse& stats, const HttpCounters& counters,
                        size_t http_connections) {
  std::string out;
  Metric(out, "uptime_seconds", "gauge", "Seconds since nielsd started.", stats.uptime_s());
  Metric(out, "sessions", "gauge", "Sessions in memory.", stats.sessions());
  Metric(out, "stored_sessions", "gauge", "Sessions in the state database.", stats.stored_sessions());
  Metric(out, "requests_total", "counter", "Requests the engine handled.", static_cast<double>(stats.requests_total()));
  Metric(out, "tokens_generated_total", "counter", "Tokens sampled.", static_cast<double>(stats.tokens_generated_total()));
  Metric(out, "tokens_prefilled_total", "counter", "Prompt tokens prefilled.",
         static_cast<double>(stats.tokens_prefilled_total()));
  Metric(out, "prefix_hit_tokens_total", "counter", "Prompt tokens served from cached KV blocks.",
         static_cast<double>(stats.prefix_hit_tokens()));
  Metric(out, "queued_requests", "gauge", "Requests waiting for the engine.", stats.queued_requests());
  Metric(out, "running_sequences", "gauge", "Chat and Generate turns running.", stats.running_sequences());
  Metric(out, "kv_blocks_total", "gauge", "KV blocks of the pool.", stats.kv_blocks_total());
  Metric(out, "kv_blocks_used", "gauge", "KV blocks referenced by a session.", stats.kv_blocks_used());
  Metric(out, "kv_blocks_cached", "gauge", "KV blocks kept for prefix reuse.", stats.kv_blocks_cached());
  Metric(out, "kv_bytes", "gauge", "KV cache bytes in use.", static_cast<double>(stats.kv_bytes()));
  Metric(out, "kv_spill_bytes", "gauge", "Bytes of KV spill files on disk.", static_cast<double>(stats.kv_spill_bytes()));
  Metric(out, "http_connections", "gauge", "Open HTTP connections.", static_cast<double>(http_connections));
  out += "# HELP nielsd_budget_refusals_total Requests refused by a budget.\n"
         "# TYPE nielsd_budget_refusals_total counter\n";
  for (const niels::v1::BudgetRefusals& refusals : stats.budget_refusals()) {
    fmt::format_to(std::back_inserter(out), "nielsd_budget_refusals_total{{budget=\"{}\"}} {}\n",
                   LabelValue(refusals.name()), refusals.refused());
  }
  out += "# HELP nielsd_http_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE nielsd_http_requests_total counter\n";
  for (const auto& [key, count] : counters.requests()) {
    fmt::format_to(std::back_inserter(out), "nielsd_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                   LabelValue(key.first), key.second, count);
  }
  Histogram(out, "http_time_to_first_token_seconds",
            "Seconds from a generation's submission to its first token, by endpoint.", counters.first_token());
  Histogram(out, "http_token_latency_seconds",
            "Seconds between consecutive generated tokens, by endpoint.", counters.token_gap());
  return out;
}

boost::asio::awaitable<void> HandleMetrics(Exchange& exchange, const HttpCounters& counters,
                                           size_t http_connections) {
  niels::v1::Request request;
  request.mutable_stats();
  niels::v1::Response response = co_await exchange.Call(std::move(request));
  if (response.has_error()) {
    co_await exchange.RespondError(FromStatus(common::FromProto(response.error())));
    co_return;
  }
  co_await exchange.Respond(200, MetricsText(response.stats(), counters, http_connections),
                            "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace niels::daemon::http
