// nielsd-bench: speed of the niels_gpt transformer on a random model of a given shape.
//
// Prints medians over --repeats runs of: prefill tokens/s, cached decode tokens/s (B = 1 and a
// batch of --batch sessions), uncached decode tokens/s (a full forward over the whole context per
// token, as the --no-kv-cache path does), KV bytes per token, the machine's memory bandwidth (a
// large multi-threaded buffer copy, read + write bytes counted as STREAM does) and the bandwidth
// bound for decode (bandwidth / weight bytes), and beside it a read-only bandwidth (what decode does
// with its weights) and decode as a fraction of that. With --json every figure is one JSON line.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>

#include "daemon/model/threading.h"
#include "daemon/model/tokenizer.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"

namespace niels::bench {
namespace {

using daemon::model::KvCache;
using daemon::model::ModelConfig;
using daemon::model::Transformer;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string preset = "personal";
  ModelConfig config;
  int threads = 0;
  std::string thread_setup = "blas";
  int repeats = 5;
  int64_t prompt = 512;        // prefill prompt length (capped at T)
  int64_t decode_tokens = 128;  // cached decode steps after the prompt
  int64_t uncached_steps = 4;
  int64_t batch = 4;
  int64_t bandwidth_mib = 512;  // size of each of the two copy buffers
  bool json = false;
  std::string write_model_dir;  // set: write a random-weight model directory there and exit
  std::string tokenizer = NIELS_SOURCE_DIR "/models/niels-demo/tokenizer.model";
};

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Runs `measure` (which returns one figure) `repeats` times and returns the median.
template <typename Fn>
double MedianOf(int repeats, Fn&& measure) {
  std::vector<double> runs;
  for (int i = 0; i < repeats; ++i) runs.push_back(measure());
  return Median(runs);
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = id(rng);
  return tokens;
}

// Memory bandwidth in bytes/s: `threads` threads each memcpy a slice of a `bytes` buffer into a
// second buffer; read + write bytes are counted (2 * bytes per copy), as STREAM's Copy does.
double MeasureBandwidth(int64_t bytes, int threads, int repeats) {
  std::unique_ptr<char[]> src(new char[bytes]);
  std::unique_ptr<char[]> dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);  // touch every page before timing
  std::memset(dst.get(), 2, bytes);
  const int64_t slice = bytes / threads;
  return MedianOf(repeats, [&] {
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { std::memcpy(dst.get() + t * slice, src.get() + t * slice, slice); });
    }
    for (auto& w : workers) w.join();
    return 2.0 * static_cast<double>(slice * threads) / Seconds(start);
  });
}

// Read-only bandwidth in bytes/s: `threads` threads each sum a slice of a `bytes` buffer (what a
// decode step does with the weights: it only reads them). Reported beside the copy figure.
double MeasureReadBandwidth(int64_t bytes, int threads, int repeats) {
  const int64_t words = bytes / static_cast<int64_t>(sizeof(uint64_t));
  std::unique_ptr<uint64_t[]> src(new uint64_t[words]);
  for (int64_t i = 0; i < words; ++i) src[i] = static_cast<uint64_t>(i);  // touch every page
  const int64_t slice = words / threads;
  std::vector<uint64_t> sums(threads);
  return MedianOf(repeats, [&] {
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const uint64_t* p = src.get() + t * slice;
        uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains so the adds keep up with memory
        for (int64_t i = 0; i + 3 < slice; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
        sums[t] = a + b + c + d;
      });
    }
    for (auto& w : workers) w.join();
    return static_cast<double>(slice * threads * sizeof(uint64_t)) / Seconds(start);
  });
}

struct Results {
  double prefill_tok_s = 0, decode_tok_s = 0, batched_decode_tok_s = 0, uncached_decode_tok_s = 0;
  double kv_bytes_per_token = 0, bandwidth = 0, read_bandwidth = 0, weight_bytes = 0;
  int64_t prefill_len = 0, decode_start = 0, context = 0;
};

void RunModel(const Options& o, Results& r, std::shared_ptr<daemon::kernels::WorkerPool> pool) {
  const ModelConfig& c = o.config;
  const Transformer model(c, daemon::model::RandomWeights(c, /*seed=*/1), std::move(pool));
  r.weight_bytes = static_cast<double>(model.weights().bytes());
  r.prefill_len = std::min(o.prompt, c.context);
  r.decode_start = std::max<int64_t>(1, std::min(r.prefill_len, c.context - o.decode_tokens));
  const int64_t steps = std::min(o.decode_tokens, c.context - r.decode_start);
  r.context = r.decode_start + steps;
  const auto tokens = RandomTokens(c.context, c.vocab_size, 2);
  const std::span<const int32_t> all(tokens);

  model.Forward(all.first(8));  // warm-up: thread pools, allocator
  r.prefill_tok_s = MedianOf(o.repeats, [&] {
    KvCache cache(c);
    const auto start = Clock::now();
    model.Prefill(all.first(r.prefill_len), cache);
    return r.prefill_len / Seconds(start);
  });

  // Decodes `steps` tokens after a prefilled prompt for each of `caches`; returns tokens/s.
  auto decode = [&](std::vector<KvCache>& caches) {
    std::vector<KvCache*> ptrs;
    for (auto& cache : caches) {
      cache.Clear();
      model.Prefill(all.first(r.decode_start), cache);
      ptrs.push_back(&cache);
    }
    const auto start = Clock::now();
    for (int64_t i = 0; i < steps; ++i) {
      std::vector<int32_t> step(ptrs.size(), tokens[r.decode_start + i]);
      model.Decode(step, ptrs);
    }
    return static_cast<double>(steps * ptrs.size()) / Seconds(start);
  };
  std::vector<KvCache> single;
  single.emplace_back(c);
  r.decode_tok_s = MedianOf(o.repeats, [&] { return decode(single); });
  r.kv_bytes_per_token = static_cast<double>(single[0].bytes()) / static_cast<double>(single[0].length());
  std::vector<KvCache> batch;
  for (int64_t b = 0; b < o.batch; ++b) batch.emplace_back(c);
  r.batched_decode_tok_s = MedianOf(o.repeats, [&] { return decode(batch); });

  // Uncached: every token costs a full forward over the whole context (last position's logits).
  r.uncached_decode_tok_s = MedianOf(o.repeats, [&] {
    const auto start = Clock::now();
    for (int64_t i = 0; i < o.uncached_steps; ++i) model.Forward(all.first(r.context), /*last_only=*/true);
    return o.uncached_steps / Seconds(start);
  });
}

void Print(const Options& o, const Results& r, int threads, const daemon::kernels::WorkerPool& pool) {
  const double bound = r.bandwidth / r.weight_bytes;
  const double fraction = r.decode_tok_s / bound;
  if (o.json) {
    auto line = [&](const char* metric, double value, const char* unit) {
      std::printf("{\"metric\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"preset\": \"%s\"}\n", metric, value,
                  unit, o.preset.c_str());
    };
    line("prefill_tok_s", r.prefill_tok_s, "tokens/s");
    line("decode_tok_s", r.decode_tok_s, "tokens/s");
    line("batched_decode_tok_s", r.batched_decode_tok_s, "tokens/s");
    line("uncached_decode_tok_s", r.uncached_decode_tok_s, "tokens/s");
    line("kv_bytes_per_token", r.kv_bytes_per_token, "bytes");
    line("mem_bandwidth_gb_s", r.bandwidth / 1e9, "GB/s");
    line("decode_bound_tok_s", bound, "tokens/s");
    line("decode_fraction_of_bound", fraction, "ratio");
    line("mem_read_bandwidth_gb_s", r.read_bandwidth / 1e9, "GB/s");
    line("decode_fraction_of_read_bound", r.decode_tok_s * r.weight_bytes / r.read_bandwidth, "ratio");
    return;
  }
  const ModelConfig& c = o.config;
  std::printf("model %s: V %lld T %lld C %lld L %lld H %lld d_ff %lld, weights %.1f MB (f32)\n", o.preset.c_str(),
              (long long)c.vocab_size, (long long)c.context, (long long)c.width, (long long)c.layers,
              (long long)c.heads, (long long)c.d_ff, r.weight_bytes / 1e6);
  std::printf("threads: %d (%s)\n", threads, daemon::model::DescribeThreads(pool).c_str());
  std::printf("medians over %d runs\n", o.repeats);
  std::printf("prefill          %9.1f tokens/s  (%lld-token prompt)\n", r.prefill_tok_s, (long long)r.prefill_len);
  std::printf("decode (cached)  %9.1f tokens/s  (%lld tokens after a %lld-token prompt)\n", r.decode_tok_s,
              (long long)(r.context - r.decode_start), (long long)r.decode_start);
  std::printf("decode, B = %-3lld  %9.1f tokens/s  (all sessions together)\n", (long long)o.batch,
              r.batched_decode_tok_s);
  std::printf("decode uncached  %9.1f tokens/s  (full forward over %lld tokens per token)\n",
              r.uncached_decode_tok_s, (long long)r.context);
  std::printf("cached / uncached %8.1fx\n", r.decode_tok_s / r.uncached_decode_tok_s);
  std::printf("KV bytes/token   %9.0f\n", r.kv_bytes_per_token);
  std::printf("memory bandwidth %9.2f GB/s (memcpy on all %u cores, read + write bytes counted as STREAM Copy)\n",
              r.bandwidth / 1e9, std::thread::hardware_concurrency());
  std::printf("bandwidth bound  %9.1f tokens/s  (bandwidth / weight bytes)\n", bound);
  std::printf("decode / bound   %9.2f\n", fraction);
  std::printf("read bandwidth   %9.2f GB/s (sum over a buffer on all cores: what decode does with weights)\n",
              r.read_bandwidth / 1e9);
  std::printf("decode / read bound %6.2f\n", r.decode_tok_s * r.weight_bytes / r.read_bandwidth);
}

bool ApplyPreset(Options& o) {
  ModelConfig& c = o.config;
  if (o.preset == "personal") {
    c.vocab_size = 16000, c.context = 512, c.width = 384, c.layers = 8, c.heads = 6, c.d_ff = 1152;
  } else if (o.preset == "base") {
    c.vocab_size = 16000, c.context = 1024, c.width = 512, c.layers = 8, c.heads = 8, c.d_ff = 1536;
  } else {
    return o.preset == "custom";
  }
  return true;
}

// --write-model-dir: config.json of the preset's shape, but with V = the tokenizer's vocabulary
// (a model directory must agree with its tokenizer), RandomWeights(seed 1), and the tokenizer.
int WriteModelDir(const Options& o) {
  auto tokenizer = daemon::model::Tokenizer::Load(o.tokenizer);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "nielsd-bench: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  ModelConfig c = o.config;
  c.vocab_size = (*tokenizer)->vocab_size();
  c.name = "random-" + o.preset;
  const std::filesystem::path dir(o.write_model_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::copy_file(o.tokenizer, dir / "tokenizer.model", std::filesystem::copy_options::overwrite_existing,
                             ec);
  std::ofstream config(dir / "config.json", std::ios::trunc);
  config << daemon::model::ModelConfigToJson(c);
  config.close();
  if (ec || !config) {
    std::fprintf(stderr, "nielsd-bench: cannot write %s: %s\n", dir.c_str(), ec ? ec.message().c_str() : "write error");
    return 1;
  }
  const common::Status saved = daemon::model::SaveWeights(daemon::model::RandomWeights(c, /*seed=*/1),
                                                          dir / "model.safetensors");
  if (!saved.ok()) {
    std::fprintf(stderr, "nielsd-bench: %s\n", saved.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s: %s shape (V %lld from the tokenizer, T %lld, C %lld, L %lld, H %lld, d_ff %lld)\n",
              dir.c_str(), o.preset.c_str(), (long long)c.vocab_size, (long long)c.context, (long long)c.width,
              (long long)c.layers, (long long)c.heads, (long long)c.d_ff);
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  ModelConfig flags;
  CLI::App app{"nielsd-bench: prefill/decode speed of a random niels_gpt model, and the memory-bandwidth bound"};
  app.add_option("--preset", o.preset, "personal, base, or custom (shape from the flags)")->capture_default_str();
  app.add_option("--V", flags.vocab_size, "vocabulary size (overrides the preset)");
  app.add_option("--T", flags.context, "context length");
  app.add_option("--C", flags.width, "width");
  app.add_option("--L", flags.layers, "layers");
  app.add_option("--H", flags.heads, "heads");
  app.add_option("--d_ff", flags.d_ff, "MLP width");
  app.add_option("--threads", o.threads, "threads (0 = number of cores)")->capture_default_str();
  app.add_option("--thread-setup", o.thread_setup, "blas (1 torch thread, n BLAS threads) or torch (n and n)")
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "runs per figure (the median is printed)")->capture_default_str();
  app.add_option("--prompt", o.prompt, "prefill prompt length (capped at T)")->capture_default_str();
  app.add_option("--decode-tokens", o.decode_tokens, "cached decode steps")->capture_default_str();
  app.add_option("--uncached-steps", o.uncached_steps, "uncached steps per run")->capture_default_str();
  app.add_option("--batch", o.batch, "sessions in the batched decode figure")->capture_default_str();
  app.add_option("--bandwidth-mib", o.bandwidth_mib, "MiB per copy buffer (two are allocated)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per figure");
  app.add_option("--write-model-dir", o.write_model_dir,
                 "write a random-weight model directory of this shape (for nielsd and nielsd-load-bench) and exit");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.model for --write-model-dir (V becomes its vocab size)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (!ApplyPreset(o)) {
    std::fprintf(stderr, "nielsd-bench: unknown preset '%s' (personal, base, custom)\n", o.preset.c_str());
    return 2;
  }
  ModelConfig& c = o.config;
  for (auto [flag, field] : {std::pair{flags.vocab_size, &c.vocab_size}, {flags.context, &c.context},
                             {flags.width, &c.width}, {flags.layers, &c.layers}, {flags.heads, &c.heads},
                             {flags.d_ff, &c.d_ff}}) {
    if (flag > 0) *field = flag;
  }
  if (c.vocab_size <= 0 || c.context <= 0 || c.layers <= 0 || c.heads <= 0 || c.d_ff <= 0 || c.width <= 0 ||
      c.width % c.heads != 0 || c.head_dim() % 2 != 0 || o.repeats < 1 || o.batch < 1) {
    std::fprintf(stderr, "nielsd-bench: invalid shape or counts (need C %% H == 0, C/H even, all > 0)\n");
    return 2;
  }
  if (!o.write_model_dir.empty()) return WriteModelDir(o);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  daemon::model::ConfigureThreads(threads, o.thread_setup == "torch" ? daemon::model::ThreadSetup::kTorchThreads
                                                                      : daemon::model::ThreadSetup::kBlasThreads);
  Results r;
  // The machine's bandwidth: every core copies, whatever --threads says.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.bandwidth = MeasureBandwidth(o.bandwidth_mib << 20, cores, std::max(o.repeats, 5));
  r.read_bandwidth = MeasureReadBandwidth(o.bandwidth_mib << 20, cores, std::max(o.repeats, 5));
  auto pool = std::make_shared<daemon::kernels::WorkerPool>(threads);
  RunModel(o, r, pool);
  Print(o, r, threads, *pool);
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
