// nielsd-bench: speed of nielsd's forward pass on its own kernels, for a model file (--model: a niels
// directory, a Hugging Face directory or a GGUF file, quantized types included: whatever
// loaders::LoadModel reads) or random weights of a preset shape (--preset personal|base|qwen3-0.6b|
// llama3.2-1b, bench/bench_models.h) in a weight dtype or quantization mix (--dtype), with a KV
// cache dtype (--kv-dtype f32|f16), and nielsd's start-up time.
//
// Prints medians over --repeats runs of: prefill tokens/s (a --prompt-token prompt into an empty
// cache, last position's logits only, as a chat prefill), cached decode tokens/s at a depth of
// --prompt tokens (min(--prompt, T - --decode-tokens): 512, or 384 for personal whose T is 512; B = 1,
// and a batch of --batch sessions), uncached decode tokens/s (a full forward per token, the
// --no-kv-cache path), the weight bytes a decode step reads, the KV bytes a cached token takes, the
// machine's read bandwidth (a sum over a large buffer on all cores, sampled between the decode runs
// so that both see the same machine: on a shared host it moves by a third between minutes) and
// decode as a fraction of two bounds: read bandwidth / weight bytes, and read bandwidth /
// everything a step reads (weights plus the KV cache at the decode's context length), plus the
// memcpy bandwidth as STREAM counts it. Then start-up: nielsd launched on the --model (or a niels
// directory of a niels_gpt preset written for it), the time until it sends READY=1 (sd_notify) and
// until an Info request is answered; --startup-only measures that alone. With --json every figure is
// one JSON line.
//
// Side by side with llama.cpp on the same GGUF file: bench/vs_llamacpp.py (README.md, "Benchmarks
// against llama.cpp").

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "client/daemon_client.h"
#include "bench/bench_models.h"
#include "daemon/kernels/dtype.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/kernels/heap_tuning.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"

extern char** environ;

namespace niels::bench {
namespace {

using daemon::kernels::Dtype;
using daemon::model::KvCache;
using daemon::model::ModelConfig;
using daemon::model::Transformer;
using daemon::model::Weights;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string preset = "personal";
  ModelConfig config;
  std::string model_dir;  // set: benchmark this model directory instead of random weights
  std::string dtype = "file";  // of the weight matrices: "file" keeps --model's (random weights: f32)
  std::string kv_dtype = "f32";  // of the KV caches (nielsd --kv-dtype)
  int kv_delta_prompts = 8;      // with --kv-dtype f16: prompts of the logprob comparison with f32 KV
  int threads = 0;
  int repeats = 5;
  int64_t prompt = 512;         // prefill prompt length (capped at T)
  int64_t decode_tokens = 128;  // cached decode steps after the prompt
  int64_t uncached_steps = 4;
  int64_t batch = 4;
  int64_t bandwidth_mib = 512;  // size of each of the two copy buffers
  int startup_runs = 5;         // nielsd launches for the start-up figure (0: skip)
  bool startup_only = false;    // measure start-up only (no model loaded in this process)
  std::string nielsd = NIELSD_BINARY;
  bool json = false;
  std::string write_model_dir;  // set: write a random-weight model directory there and exit
  std::string tokenizer = NIELS_SOURCE_DIR "/models/niels-demo/tokenizer.model";
};

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0.0;
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
// decode step does with the weights and the KV cache: it only reads them). One Sample() is one pass.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(int64_t bytes, int threads)
      : words_(bytes / static_cast<int64_t>(sizeof(uint64_t))), threads_(threads), src_(new uint64_t[words_]),
        sums_(threads) {
    for (int64_t i = 0; i < words_; ++i) src_[i] = static_cast<uint64_t>(i);  // touch every page
  }
  double Sample() {
    const int64_t slice = words_ / threads_;
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads_; ++t) {
      workers.emplace_back([&, t] {
        const uint64_t* p = src_.get() + t * slice;
        uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains so the adds keep up with memory
        for (int64_t i = 0; i + 3 < slice; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
        sums_[t] = a + b + c + d;
      });
    }
    for (auto& w : workers) w.join();
    return static_cast<double>(slice * threads_ * sizeof(uint64_t)) / Seconds(start);
  }

 private:
  int64_t words_;
  int threads_;
  std::unique_ptr<uint64_t[]> src_;
  std::vector<uint64_t> sums_;
};

struct Startup {
  double ready_ms = 0, info_ms = 0;
  std::string dir;
};

// f16 KV against f32 KV on the same weights (--kv-dtype f16): greedy decoding with the f32 KV cache,
// the same tokens fed to an f16 KV cache; |logprob difference| of each chosen token and whether
// the f16 cache's argmax differs.
struct KvDelta {
  double max_abs = 0, mean_abs = 0;
  int64_t tokens = 0, argmax_differs = 0, prompts = 0, prompt_len = 0, steps = 0;
};

struct Results {
  std::optional<KvDelta> kv_delta;
  double prefill_tok_s = 0, decode_tok_s = 0, batched_decode_tok_s = 0, uncached_decode_tok_s = 0;
  double kv_bytes_per_token = 0, bandwidth = 0, read_bandwidth = 0, weight_bytes = 0;
  // KV bytes one B = 1 decode step reads, averaged over the measured steps (2 x L x C elements per
  // position it attends to).
  double decode_kv_read_bytes = 0;
  int64_t prefill_len = 0, decode_start = 0, context = 0;
  std::optional<Startup> startup;
};

// log_softmax(logits)[token] in double.
double LogProb(std::span<const float> logits, int32_t token) {
  double max = logits[0], total = 0;
  for (float x : logits) max = std::max<double>(max, x);
  for (float x : logits) total += std::exp(static_cast<double>(x) - max);
  return static_cast<double>(logits[static_cast<size_t>(token)]) - max - std::log(total);
}

KvDelta MeasureKvDelta(const Transformer& f16_kv, const Transformer& f32_kv, int prompts, int64_t prompt_len,
                       int64_t steps) {
  const ModelConfig& c = f16_kv.config();
  KvDelta d;
  d.prompts = prompts;
  d.prompt_len = std::min(prompt_len, c.context - 1);
  d.steps = std::min(steps, c.context - d.prompt_len);
  double sum = 0;
  for (int p = 0; p < prompts; ++p) {
    const auto prompt = RandomTokens(d.prompt_len, c.vocab_size, 100 + static_cast<uint32_t>(p));
    KvCache a(c, Dtype::kF32), b(c, Dtype::kF16);
    std::vector<float> la = f32_kv.Prefill(prompt, a), lb = f16_kv.Prefill(prompt, b);
    KvCache* pa[] = {&a};
    KvCache* pb[] = {&b};
    for (int64_t i = 0; i < d.steps; ++i) {
      const auto token = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      const auto token_b = static_cast<int32_t>(std::max_element(lb.begin(), lb.end()) - lb.begin());
      const double delta = std::abs(LogProb(la, token) - LogProb(lb, token));
      d.max_abs = std::max(d.max_abs, delta);
      sum += delta;
      ++d.tokens;
      d.argmax_differs += token_b != token ? 1 : 0;
      if (i + 1 < d.steps) {
        la = f32_kv.Decode(std::span(&token, 1), pa);
        lb = f16_kv.Decode(std::span(&token, 1), pb);
      }
    }
  }
  d.mean_abs = d.tokens > 0 ? sum / static_cast<double>(d.tokens) : 0;
  return d;
}

void RunModel(const Options& o, const Transformer& model, ReadBandwidthProbe& bandwidth, Results& r) {
  const ModelConfig& c = model.config();
  r.weight_bytes = static_cast<double>(model.weights().bytes());
  r.prefill_len = std::min(o.prompt, c.context);
  r.decode_start = std::max<int64_t>(1, std::min(r.prefill_len, c.context - o.decode_tokens));
  const int64_t steps = std::min(o.decode_tokens, c.context - r.decode_start);
  r.context = r.decode_start + steps;
  const auto tokens = RandomTokens(c.context, c.vocab_size, 2);
  const std::span<const int32_t> all(tokens);

  model.Forward(all.first(8));  // warm-up: thread pool, allocator, the weights' pages
  // One cache for every run (as a session's pool in nielsd): its pages are touched by the first run,
  // so the timed runs do not count the kernel's first-touch page faults.
  KvCache prefill_cache(c, model.kv_dtype());
  model.Prefill(all.first(r.prefill_len), prefill_cache);
  r.prefill_tok_s = MedianOf(o.repeats, [&] {
    KvCache& cache = prefill_cache;
    cache.Clear();
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
  single.emplace_back(c, model.kv_dtype());
  // The read bandwidth is sampled before every decode run and after the last one; its median is
  // the bound's.
  std::vector<double> read_samples;
  r.decode_tok_s = MedianOf(o.repeats, [&] {
    read_samples.push_back(bandwidth.Sample());
    return decode(single);
  });
  read_samples.push_back(bandwidth.Sample());
  r.read_bandwidth = Median(read_samples);
  r.kv_bytes_per_token = static_cast<double>(single[0].bytes()) / static_cast<double>(single[0].length());
  // Step i (from 0) attends to decode_start + i + 1 positions.
  const double mean_positions = static_cast<double>(r.decode_start) + static_cast<double>(steps + 1) / 2.0;
  r.decode_kv_read_bytes = mean_positions * 2.0 * static_cast<double>(c.layers * c.kv_width()) *
                           static_cast<double>(daemon::kernels::DtypeSize(model.kv_dtype()));
  if (o.batch > 0) {
    std::vector<KvCache> batch;
    for (int64_t b = 0; b < o.batch; ++b) batch.emplace_back(c, model.kv_dtype());
    r.batched_decode_tok_s = MedianOf(o.repeats, [&] { return decode(batch); });
  }
  // Uncached: every token costs a full forward over the whole context (last position's logits).
  if (o.uncached_steps > 0) {
    r.uncached_decode_tok_s = MedianOf(o.repeats, [&] {
      const auto start = Clock::now();
      for (int64_t i = 0; i < o.uncached_steps; ++i) model.Forward(all.first(r.context), /*last_only=*/true);
      return o.uncached_steps / Seconds(start);
    });
  }
}

// Writes config.json (V from the tokenizer), model.safetensors (RandomWeights(seed 1) in `dtype`)
// and tokenizer.model into `dir`.
common::Status WriteRandomModelDir(const Options& o, const std::filesystem::path& dir, Dtype dtype, ModelConfig* out) {
  auto tokenizer = daemon::text::SentencePieceTokenizer::Load(o.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status();
  ModelConfig c = o.config;
  c.vocab_size = (*tokenizer)->vocab_size();
  c.name = "random-" + o.preset;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::copy_file(o.tokenizer, dir / "tokenizer.model", std::filesystem::copy_options::overwrite_existing,
                             ec);
  std::ofstream config(dir / "config.json", std::ios::trunc);
  config << daemon::model::ModelConfigToJson(c);
  config.close();
  if (ec || !config) {
    return common::Status::Internal("cannot write " + dir.string() + ": " + (ec ? ec.message() : "write error"));
  }
  NIELS_RETURN_IF_ERROR(daemon::loaders::SaveNielsWeights(daemon::model::RandomWeights(c, /*seed=*/1), dir / "model.safetensors", dtype));
  if (out != nullptr) *out = c;
  return common::Status::Ok();
}

// One launch of nielsd on `dir`: milliseconds until READY=1 arrives on its NOTIFY_SOCKET and until
// an Info request is answered (connecting in a loop every 0.2 ms). nielsd is stopped with SIGTERM.
std::optional<Startup> LaunchOnce(const Options& o, const std::filesystem::path& dir, const std::filesystem::path& work,
                                  std::string* error) {
  const std::string socket = (work / "nielsd.sock").string(), notify = (work / "notify.sock").string();
  std::filesystem::remove(notify);
  const int notify_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", notify.c_str());
  if (notify_fd < 0 || ::bind(notify_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    *error = "cannot bind " + notify;
    if (notify_fd >= 0) ::close(notify_fd);
    return std::nullopt;
  }
  std::vector<std::string> env_strings = {"NOTIFY_SOCKET=" + notify};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) != 0) env_strings.emplace_back(*e);
  }
  std::vector<char*> env;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::string> arg_strings = {o.nielsd, "--model", dir.string(), "--socket", socket, "--threads",
                                          std::to_string(threads), "--kv-dtype", o.kv_dtype, "--log-level", "warn",
                                          "--state-dir", (work / "state").string()};
  std::vector<char*> args;
  for (std::string& s : arg_strings) args.push_back(s.data());
  args.push_back(nullptr);

  pid_t pid = -1;
  const auto start = Clock::now();
  if (posix_spawn(&pid, o.nielsd.c_str(), nullptr, nullptr, args.data(), env.data()) != 0) {
    *error = "cannot start " + o.nielsd;
    ::close(notify_fd);
    return std::nullopt;
  }
  Startup s;
  bool ready = false, answered = false;
  while ((!ready || !answered) && Seconds(start) < 30.0) {
    char buffer[512];
    const ssize_t n = ::recv(notify_fd, buffer, sizeof buffer - 1, 0);
    if (n > 0) {
      buffer[n] = '\0';
      if (!ready && std::strstr(buffer, "READY=1") != nullptr) {
        ready = true;
        s.ready_ms = Seconds(start) * 1e3;
      }
    }
    if (!answered) {
      auto client = client::DaemonClient::Connect(socket);
      if (client.ok() && (*client)->Info().ok()) {
        answered = true;
        s.info_ms = Seconds(start) * 1e3;
      }
    }
    if (!ready || !answered) std::this_thread::sleep_for(std::chrono::microseconds(200));
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      *error = "nielsd exited during start-up (run it on " + dir.string() + " to see why)";
      ::close(notify_fd);
      return std::nullopt;
    }
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(notify_fd);
  if (!ready || !answered) {
    *error = "nielsd did not become ready within 30 s";
    return std::nullopt;
  }
  return s;
}

std::optional<Startup> MeasureStartup(const Options& o, std::string* error) {
  const std::filesystem::path work =
      std::filesystem::temp_directory_path() / ("nielsd-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(work);
  std::filesystem::path dir = o.model_dir;
  if (dir.empty()) {
    dir = work / "model";
    const common::Status written = WriteRandomModelDir(o, dir, *daemon::kernels::ParseDtype(o.dtype), nullptr);
    if (!written.ok()) {
      *error = written.ToString();
      return std::nullopt;
    }
  }
  std::vector<double> ready, info;
  for (int i = 0; i < o.startup_runs; ++i) {
    std::optional<Startup> s = LaunchOnce(o, dir, work, error);
    if (!s) break;
    ready.push_back(s->ready_ms);
    info.push_back(s->info_ms);
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  if (ready.size() != static_cast<size_t>(o.startup_runs)) return std::nullopt;
  return Startup{Median(ready), Median(info), o.model_dir.empty() ? "random weights, V from the tokenizer" : dir.string()};
}

void Print(const Options& o, const Transformer& model, const Results& r, const daemon::kernels::WorkerPool& pool) {
  const ModelConfig& c = model.config();
  // The weights' dtype (of the token embedding), or the mix random weights were made in.
  const std::string dtype =
      o.model_dir.empty() ? o.dtype : std::string(daemon::kernels::DtypeName(model.weights().dtype()));
  const std::string kv_dtype(daemon::kernels::DtypeName(model.kv_dtype()));
  const double read_bound = r.read_bandwidth / r.weight_bytes;
  const double read_fraction = r.decode_tok_s / read_bound;
  const double step_bytes = r.weight_bytes + r.decode_kv_read_bytes;
  const double step_read_bound = r.read_bandwidth / step_bytes;
  const double copy_bound = r.bandwidth / r.weight_bytes;
  if (o.json) {
    auto line = [&](const char* metric, double value, const char* unit) {
      std::printf("{\"metric\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"preset\": \"%s\", \"dtype\": \"%s\", "
                  "\"kv_dtype\": \"%s\", \"threads\": %d}\n",
                  metric, value, unit, o.model_dir.empty() ? o.preset.c_str() : o.model_dir.c_str(), dtype.c_str(),
                  kv_dtype.c_str(), pool.threads());
    };
    line("prefill_tok_s", r.prefill_tok_s, "tokens/s");
    line("prefill_tokens", static_cast<double>(r.prefill_len), "tokens");
    line("decode_depth", static_cast<double>(r.decode_start), "tokens");
    line("decode_tok_s", r.decode_tok_s, "tokens/s");
    if (o.batch > 0) line("batched_decode_tok_s", r.batched_decode_tok_s, "tokens/s");
    if (o.uncached_steps > 0) line("uncached_decode_tok_s", r.uncached_decode_tok_s, "tokens/s");
    line("weight_bytes_per_token", r.weight_bytes, "bytes");
    line("kv_bytes_per_token", r.kv_bytes_per_token, "bytes");
    if (r.kv_delta) {
      line("kv_f16_max_abs_delta_logprob", r.kv_delta->max_abs, "nats");
      line("kv_f16_mean_abs_delta_logprob", r.kv_delta->mean_abs, "nats");
      line("kv_f16_argmax_differs", static_cast<double>(r.kv_delta->argmax_differs), "tokens");
    }
    line("mem_bandwidth_gb_s", r.bandwidth / 1e9, "GB/s");
    line("decode_bound_tok_s", copy_bound, "tokens/s");
    line("decode_fraction_of_bound", r.decode_tok_s / copy_bound, "ratio");
    line("mem_read_bandwidth_gb_s", r.read_bandwidth / 1e9, "GB/s");
    line("decode_read_bound_tok_s", read_bound, "tokens/s");
    line("decode_fraction_of_read_bound", read_fraction, "ratio");
    line("decode_step_read_bytes", step_bytes, "bytes");
    line("decode_step_read_bound_tok_s", step_read_bound, "tokens/s");
    line("decode_fraction_of_step_read_bound", r.decode_tok_s / step_read_bound, "ratio");
    if (r.startup) {
      line("startup_ready_ms", r.startup->ready_ms, "ms");
      line("startup_info_ms", r.startup->info_ms, "ms");
    }
    return;
  }
  std::printf("model %s (%s): V %lld T %lld C %lld L %lld H %lld KV %lld D %lld d_ff %lld, weights %s %.1f MB, "
              "KV cache %s\n",
              o.model_dir.empty() ? o.preset.c_str() : o.model_dir.c_str(),
              std::string(daemon::model::ArchitectureName(c.architecture)).c_str(), (long long)c.vocab_size,
              (long long)c.context, (long long)c.width, (long long)c.layers, (long long)c.heads,
              (long long)c.kv_head_count(), (long long)c.head_dim(), (long long)c.d_ff,
              dtype.c_str(), r.weight_bytes / 1e6, kv_dtype.c_str());
  std::printf("threads: %d (%s)\n", pool.threads(), daemon::kernels::DescribeThreads(pool).c_str());
  std::printf("medians over %d runs\n", o.repeats);
  std::printf("prefill          %9.1f tokens/s  (%lld-token prompt, last position's logits)\n", r.prefill_tok_s,
              (long long)r.prefill_len);
  std::printf("decode (cached)  %9.1f tokens/s  (%lld tokens after a %lld-token prompt)\n", r.decode_tok_s,
              (long long)(r.context - r.decode_start), (long long)r.decode_start);
  if (o.batch > 0) {
    std::printf("decode, B = %-3lld  %9.1f tokens/s  (all sessions together)\n", (long long)o.batch,
                r.batched_decode_tok_s);
  }
  if (o.uncached_steps > 0) {
    std::printf("decode uncached  %9.1f tokens/s  (full forward over %lld tokens per token)\n",
                r.uncached_decode_tok_s, (long long)r.context);
    std::printf("cached / uncached %8.1fx\n", r.decode_tok_s / r.uncached_decode_tok_s);
  }
  std::printf("weight bytes/token %7.1f MB   (read once per decode step)\n", r.weight_bytes / 1e6);
  std::printf("KV bytes/token   %9.0f   (KV cache %s: 2 x L x KV x D x %d bytes, in whole blocks)\n", r.kv_bytes_per_token,
              kv_dtype.c_str(), static_cast<int>(daemon::kernels::DtypeSize(model.kv_dtype())));
  if (r.kv_delta) {
    const KvDelta& d = *r.kv_delta;
    std::printf("f16 KV vs f32 KV |delta logprob| of the greedy token: max %.2e, mean %.2e nats; argmax differs at "
                "%lld of %lld  (%lld prompts of %lld random tokens, %lld greedy steps each)\n",
                d.max_abs, d.mean_abs, (long long)d.argmax_differs, (long long)d.tokens, (long long)d.prompts,
                (long long)d.prompt_len, (long long)d.steps);
  }
  std::printf("read bandwidth   %9.2f GB/s (sum over a buffer on all %u cores, median of samples between the "
              "decode runs)\n",
              r.read_bandwidth / 1e9, std::thread::hardware_concurrency());
  std::printf("read bound       %9.1f tokens/s  (read bandwidth / weight bytes); decode / it %.2f\n", read_bound,
              read_fraction);
  std::printf("step read bound  %9.1f tokens/s  (read bandwidth / (weights + %.1f MB of KV a step reads at the "
              "decode's mean context)); decode / it %.2f\n",
              step_read_bound, r.decode_kv_read_bytes / 1e6, r.decode_tok_s / step_read_bound);
  std::printf("memory bandwidth %9.2f GB/s (memcpy, read + write bytes counted as STREAM Copy); decode / that "
              "bound %.2f\n",
              r.bandwidth / 1e9, r.decode_tok_s / copy_bound);
  if (r.startup) {
    std::printf("start-up         READY=1 after %.0f ms, Info answered after %.0f ms  (median of %d launches of "
                "nielsd; %s)\n",
                r.startup->ready_ms, r.startup->info_ms, o.startup_runs, r.startup->dir.c_str());
  }
}

// --startup-only: the start-up figures of --model, nothing else.
int StartupOnly(const Options& o) {
  if (o.model_dir.empty() || o.startup_runs < 1) {
    std::fprintf(stderr, "nielsd-bench: --startup-only needs --model and --startup-runs >= 1\n");
    return 2;
  }
  std::string error;
  const std::optional<Startup> s = MeasureStartup(o, &error);
  if (!s) {
    std::fprintf(stderr, "nielsd-bench: start-up not measured: %s\n", error.c_str());
    return 1;
  }
  if (o.json) {
    for (const auto& [metric, value] : {std::pair{"startup_ready_ms", s->ready_ms}, {"startup_info_ms", s->info_ms}}) {
      std::printf("{\"metric\": \"%s\", \"value\": %.6g, \"unit\": \"ms\", \"preset\": \"%s\", \"runs\": %d}\n",
                  metric, value, o.model_dir.c_str(), o.startup_runs);
    }
  } else {
    std::printf("start-up on %s (median of %d): READY=1 after %.1f ms, first Info answered after %.1f ms\n",
                o.model_dir.c_str(), o.startup_runs, s->ready_ms, s->info_ms);
  }
  return 0;
}

bool ApplyPreset(Options& o) {
  if (o.preset == "custom") return true;
  std::optional<ModelConfig> config = PresetConfig(o.preset);
  if (!config) return false;
  o.config = *config;
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  ModelConfig flags;
  CLI::App app{"nielsd-bench: prefill/decode speed of a niels_gpt model on nielsd's kernels, the bandwidth bound, "
               "and nielsd's start-up time"};
  app.add_option("--preset", o.preset,
                 "personal, base (niels_gpt), qwen3-0.6b, llama3.2-1b (bench/bench_models.h), or custom (niels_gpt, "
                 "shape from the flags)")
      ->capture_default_str();
  app.add_option("--V", flags.vocab_size, "vocabulary size (overrides the preset)");
  app.add_option("--T", flags.context, "context length");
  app.add_option("--C", flags.width, "width");
  app.add_option("--L", flags.layers, "layers");
  app.add_option("--H", flags.heads, "heads");
  app.add_option("--d_ff", flags.d_ff, "MLP width");
  app.add_option("--model", o.model_dir, "benchmark this model directory (its shape and weights) instead of a preset");
  app.add_option("--dtype", o.dtype,
                 "weight matrices in memory: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k or q4_k_m (llama.cpp's mix, "
                 "bench/bench_models.h; default f32); with --model: file (as stored, the default), f32, f16 or bf16")
      ->check(CLI::IsMember({"file", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m"}))
      ->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype, "KV cache elements: f32 or f16 (as nielsd --kv-dtype)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  app.add_option("--kv-delta-prompts", o.kv_delta_prompts,
                 "with --kv-dtype f16: random prompts (64 tokens, then 64 greedy steps) on which the greedy tokens' "
                 "logprobs are compared with an f32 KV cache (0: skip)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "threads (0 = number of cores)")->capture_default_str();
  app.add_option("--repeats", o.repeats, "runs per figure (the median is printed)")->capture_default_str();
  app.add_option("--prompt", o.prompt, "prefill prompt length (capped at T)")->capture_default_str();
  app.add_option("--decode-tokens", o.decode_tokens, "cached decode steps")->capture_default_str();
  app.add_option("--uncached-steps", o.uncached_steps, "uncached steps per run")->capture_default_str();
  app.add_option("--batch", o.batch, "sessions in the batched decode figure")->capture_default_str();
  app.add_option("--bandwidth-mib", o.bandwidth_mib, "MiB per copy buffer (two are allocated)")
      ->capture_default_str();
  app.add_option("--startup-runs", o.startup_runs, "launches of nielsd for the start-up figure (0: skip it)")
      ->capture_default_str();
  app.add_flag("--startup-only", o.startup_only,
               "measure nielsd's start-up on --model only (this process loads nothing; warm page cache after the "
               "first launch)");
  app.add_option("--nielsd", o.nielsd, "the nielsd binary for the start-up figure")->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per figure");
  app.add_option("--write-model-dir", o.write_model_dir,
                 "write a random-weight model directory of this shape and --dtype (for nielsd, nielsd-load-bench, "
                 "niels-export) and exit");
  app.add_option("--tokenizer", o.tokenizer, "tokenizer.model for model directories (V becomes its vocab size)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (!ApplyPreset(o)) {
    std::fprintf(stderr, "nielsd-bench: unknown preset '%s' (personal, base, qwen3-0.6b, llama3.2-1b, custom)\n",
                 o.preset.c_str());
    return 2;
  }
  ModelConfig& c = o.config;
  for (auto [flag, field] : {std::pair{flags.vocab_size, &c.vocab_size}, {flags.context, &c.context},
                             {flags.width, &c.width}, {flags.layers, &c.layers}, {flags.heads, &c.heads},
                             {flags.d_ff, &c.d_ff}}) {
    if (flag > 0) *field = flag;
  }
  if (c.vocab_size <= 0 || c.context <= 0 || c.layers <= 0 || c.heads <= 0 || c.d_ff <= 0 || c.width <= 0 ||
      (c.head_size == 0 && c.width % c.heads != 0) || c.head_dim() % 2 != 0 || o.repeats < 1 || o.batch < 0 ||
      o.uncached_steps < 0) {
    std::fprintf(stderr, "nielsd-bench: invalid shape or counts (need C %% H == 0, C/H even, all > 0)\n");
    return 2;
  }
  if (o.dtype == "file" && o.model_dir.empty()) o.dtype = "f32";
  const bool niels_gpt = c.architecture == daemon::model::Architecture::kNielsGpt;
  const bool element_dtype = o.dtype == "file" || o.dtype == "f32" || o.dtype == "f16" || o.dtype == "bf16";
  if ((!o.model_dir.empty() || !o.write_model_dir.empty()) && !element_dtype) {
    std::fprintf(stderr, "nielsd-bench: --dtype %s is for random weights in memory (a file keeps its own)\n",
                 o.dtype.c_str());
    return 2;
  }
  if (!o.write_model_dir.empty() && !niels_gpt) {
    std::fprintf(stderr, "nielsd-bench: --write-model-dir writes niels_gpt presets only\n");
    return 2;
  }
  // nielsd's start-up is measured on a model directory: the --model one, or a niels directory of
  // a niels_gpt preset written for it.
  if (o.model_dir.empty() && (!niels_gpt || !element_dtype)) o.startup_runs = 0;
  if (!o.write_model_dir.empty()) {
    ModelConfig written;
    const common::Status s =
        WriteRandomModelDir(o, o.write_model_dir, *daemon::kernels::ParseDtype(o.dtype), &written);
    if (!s.ok()) {
      std::fprintf(stderr, "nielsd-bench: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote %s: %s shape (V %lld from the tokenizer, T %lld, C %lld, L %lld, H %lld, d_ff %lld), %s\n",
                o.write_model_dir.c_str(), o.preset.c_str(), (long long)written.vocab_size, (long long)written.context,
                (long long)written.width, (long long)written.layers, (long long)written.heads, (long long)written.d_ff,
                o.dtype.c_str());
    return 0;
  }
  if (o.startup_only) return StartupOnly(o);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  daemon::kernels::TuneHeapForActivations();
  auto pool = std::make_shared<daemon::kernels::WorkerPool>(threads);
  const Dtype kv_dtype = *daemon::kernels::ParseDtype(o.kv_dtype);
  std::unique_ptr<Transformer> model;
  std::unique_ptr<daemon::loaders::Model> loaded;  // keeps a --model directory's mapping alive
  if (!o.model_dir.empty()) {
    daemon::loaders::LoadOptions load;
    if (o.dtype != "file") load.dtype = daemon::kernels::ParseDtype(o.dtype);
    auto dir = daemon::loaders::LoadModel(o.model_dir, pool, load);
    if (!dir.ok()) {
      std::fprintf(stderr, "nielsd-bench: %s\n", dir.status().ToString().c_str());
      return 1;
    }
    loaded = std::move(dir).value();
    c = loaded->config;
    model = std::make_unique<Transformer>(c, loaded->transformer->weights(), pool, kv_dtype);
  } else if (niels_gpt && element_dtype) {  // as before the family presets: the same weights
    auto weights = daemon::model::ConvertWeights(daemon::model::RandomWeights(c, /*seed=*/1),
                                                 *daemon::kernels::ParseDtype(o.dtype));
    if (!weights.ok()) {
      std::fprintf(stderr, "nielsd-bench: %s\n", weights.status().ToString().c_str());
      return 1;
    }
    model = std::make_unique<Transformer>(c, std::move(weights).value(), pool, kv_dtype);
  } else {
    if (std::optional<std::string> problem = WeightMixProblem(c, o.dtype)) {
      std::fprintf(stderr, "nielsd-bench: %s\n", problem->c_str());
      return 1;
    }
    model = std::make_unique<Transformer>(c, RandomWeightsInMix(c, o.dtype, /*seed=*/1, threads), pool, kv_dtype);
  }
  Results r;
  // The machine's bandwidth: every core reads, whatever --threads says.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.bandwidth = MeasureBandwidth(o.bandwidth_mib << 20, cores, std::max(o.repeats, 5));
  ReadBandwidthProbe read_bandwidth(o.bandwidth_mib << 20, cores);
  RunModel(o, *model, read_bandwidth, r);
  if (kv_dtype == Dtype::kF16 && o.kv_delta_prompts > 0) {
    const Transformer f32_kv(model->config(), model->weights(), pool, Dtype::kF32);
    r.kv_delta = MeasureKvDelta(*model, f32_kv, o.kv_delta_prompts, 64, 64);
  }
  if (o.startup_runs > 0) {
    std::string error;
    r.startup = MeasureStartup(o, &error);
    if (!r.startup) std::fprintf(stderr, "nielsd-bench: start-up not measured: %s\n", error.c_str());
  }
  Print(o, *model, r, *pool);
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
