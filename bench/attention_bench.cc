// nielsd-attention-bench: the forward step over a long cached prefix, in process: the
// time of a follow-up prefill of --rows tokens after a cached prefix of each --depths length, on a
// preset shape with random weights (default Qwen3-0.6B, f16 weights, f16 KV), and the same step's
// attention alone (simd::Attend over the same blocks, as ForwardStep calls it, on the step's
// threads). The ratio of the long depth's step to the short one's is what a chat's later turns
// pay for a long system prompt (bench/vs_llamacpp.py system-prompt measures it through a real
// daemon).
//
// Output: a table, or with --json one JSON line per depth:
//   {"bench":"attention","depth":N,"rows":N,"step_ms":X,"attention_ms":X,"attention_gflop_s":X}
// Medians of --repeats runs. No libtorch.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_models.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/forward_step.h"
#include "daemon/model/kv_cache.h"
#include "daemon/model/kv_pool.h"
#include "daemon/model/transformer.h"

namespace niels::bench {
namespace {

using Clock = std::chrono::steady_clock;
using daemon::kernels::Dtype;
using daemon::model::KvCache;
using daemon::model::Transformer;

struct Options {
  std::string preset = "qwen3-0.6b";
  std::string dtype = "f16";
  std::string kv_dtype = "f16";
  std::vector<int64_t> depths = {100, 6000};
  int64_t rows = 40;
  int64_t layers = 0;  // 0: the preset's
  int threads = 2;
  int repeats = 5;
  bool json = false;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Ms(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

std::vector<int32_t> Tokens(int64_t n, int64_t vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

// The attention of one layer of a step of `rows` rows at positions depth .. depth + rows - 1, as
// ForwardStep::Attention splits it (query blocks of ForwardStep::kQueryBlock rows), over the
// cache's blocks (layer 0's keys and values; every layer's attention is the same work).
double AttentionMs(const Transformer& model, KvCache& cache, int64_t depth, int64_t rows,
                   daemon::kernels::WorkerPool& pool) {
  const auto& c = model.config();
  const int64_t D = c.head_dim(), H = c.heads, KV = c.kv_head_count(), bt = daemon::model::KvPool::kBlockTokens;
  const int64_t size = daemon::kernels::DtypeSize(cache.pool().dtype());
  std::vector<const void*> blocks;
  for (auto id : cache.block_ids()) blocks.push_back(cache.pool().data(id));
  const daemon::model::KvBlockLayout layout{KV, D, bt};
  std::vector<float> q(static_cast<size_t>(rows * H * D), 0.5f), out(q.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : q) x = normal(rng);
  const int64_t block = daemon::model::ForwardStep::kQueryBlock;
  const int64_t group = H / KV;
  std::vector<float> scores(static_cast<size_t>(pool.threads() * group * block * (depth + rows)));
  const int64_t query_blocks = (rows + block - 1) / block, items = query_blocks * KV;
  const auto start = Clock::now();
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    std::atomic<int64_t> next{0};
    pool.Run([&](int part, int) {
      float* s = scores.data() + part * group * block * (depth + rows);
      for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1)) {
        const int64_t qb = item / KV, kv = item % KV, r0 = qb * block, h = kv * group;
        const daemon::kernels::simd::AttendArgs args{
            .q = q.data() + r0 * H * D + h * D, .q_stride = H * D, .rows = std::min(block, rows - r0),
            .first_position = depth + r0, .blocks = blocks.data(), .block_tokens = bt,
            .key_offset = layout.Offset(layer, 0, kv, 0) * size, .value_offset = layout.Offset(layer, 1, kv, 0) * size,
            .head_dim = D, .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), .scores = s,
            .scores_stride = depth + rows, .out = out.data() + r0 * H * D + h * D, .out_stride = H * D,
            .group = group, .q_group_stride = D, .out_group_stride = D};
        daemon::kernels::simd::Attend(args, cache.pool().dtype());
      }
    });
  }
  return Ms(start);
}

int Run(const Options& o) {
  auto config = PresetConfig(o.preset);
  if (!config) {
    std::fprintf(stderr, "nielsd-attention-bench: unknown preset %s\n", o.preset.c_str());
    return 1;
  }
  const int64_t longest = *std::max_element(o.depths.begin(), o.depths.end());
  config->context = std::max(config->context, longest + o.rows);
  if (o.layers > 0) config->layers = o.layers;
  if (std::optional<std::string> problem = WeightMixProblem(*config, o.dtype)) {
    std::fprintf(stderr, "nielsd-attention-bench: %s\n", problem->c_str());
    return 1;
  }
  auto pool = std::make_shared<daemon::kernels::WorkerPool>(o.threads);
  const Dtype kv = o.kv_dtype == "f32" ? Dtype::kF32 : Dtype::kF16;
  Transformer model(*config, RandomWeightsInMix(*config, o.dtype, 1, o.threads), pool, kv);
  const auto tokens = Tokens(longest + o.rows, config->vocab_size);
  const std::span<const int32_t> all(tokens);
  if (!o.json) std::printf("%s %s weights, %s KV, %d threads, %lld new rows (simd %s)\n", o.preset.c_str(),
                           o.dtype.c_str(), o.kv_dtype.c_str(), o.threads, static_cast<long long>(o.rows),
                           daemon::kernels::simd::Name());
  for (int64_t depth : o.depths) {
    KvCache cache(*config, kv);
    model.Prefill(all.first(depth), cache);
    std::vector<double> step, attention;
    for (int i = 0; i < o.repeats; ++i) {
      cache.Truncate(depth);
      auto start = Clock::now();
      model.Prefill(all.subspan(depth, o.rows), cache);
      step.push_back(Ms(start));
      attention.push_back(AttentionMs(model, cache, depth, o.rows, *pool));
    }
    const double step_ms = Median(step), attention_ms = Median(attention);
    // QK and PV: 2 FLOP per multiply-add, per head, row and position it sees.
    const double flop = 4.0 * static_cast<double>(config->heads * config->head_dim() * config->layers) *
                        static_cast<double>(o.rows) * (static_cast<double>(depth) + (o.rows + 1) / 2.0);
    if (o.json) {
      std::printf("{\"bench\":\"attention\",\"depth\":%lld,\"rows\":%lld,\"step_ms\":%.2f,\"attention_ms\":%.2f,"
                  "\"attention_gflop_s\":%.2f}\n",
                  static_cast<long long>(depth), static_cast<long long>(o.rows), step_ms, attention_ms,
                  flop / attention_ms / 1e6);
    } else {
      std::printf("depth %6lld: step %8.2f ms, attention alone %8.2f ms (%.1f GFLOP/s)\n",
                  static_cast<long long>(depth), step_ms, attention_ms, flop / attention_ms / 1e6);
    }
  }
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) {
  niels::bench::Options o;
  CLI::App app{"nielsd-attention-bench: a follow-up prefill over a long cached prefix"};
  app.add_option("--preset", o.preset, "model shape")->capture_default_str();
  app.add_option("--dtype", o.dtype, "weight dtype or mix")->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype, "f16 or f32")->capture_default_str();
  app.add_option("--depths", o.depths, "cached prefix lengths")->capture_default_str();
  app.add_option("--rows", o.rows, "new tokens per step")->capture_default_str();
  app.add_option("--layers", o.layers, "layers (0: the preset's; fewer make the prefill quicker)");
  app.add_option("--threads", o.threads, "threads")->capture_default_str();
  app.add_option("--repeats", o.repeats, "runs per figure (median)")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per depth");
  CLI11_PARSE(app, argc, argv);
  return niels::bench::Run(o);
}
