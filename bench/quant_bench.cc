// nielsd-quant-bench: MatVec throughput per weight dtype (f16, bf16 and the GGUF block types) on
// real matrix shapes, side by side: decode (1 row of x) and prefill (512 rows), on the kernels this
// CPU runs (daemon/kernels), with `--threads` workers.
//
// Decode reads every weight once per token, so it is reported as GB/s of weight bytes and as a
// fraction of the machine's read bandwidth, sampled before every round (a sum over a 512 MiB
// buffer on all threads: what a decode step does with its weights). Each decode measurement cycles
// through enough copies of the matrix (>= 256 MiB) that they come from memory, not cache, as a
// model's layers do. Prefill is reported as rows/s and GMAC/s. Every figure is the median of
// --rounds rounds; a round runs every dtype of a shape one after the other (side by side, so a
// noisy neighbour hits them alike).
//
// With --ggml-cpu-lib (libggml-cpu-<cpu>.so of node-llama-cpp, scripts/install_references.sh)
// the decode figure of ggml's own dot products (ggml_vec_dot_<type>_q8_<0|K>, ggml_vec_dot_f16 and
// _bf16; one call per output row, rows split among the same threads, activations quantized or
// rounded to the weights' 16-bit type once) is printed beside ours.
//
//   nielsd-quant-bench --threads 2                       (all shapes and dtypes; --json for lines)
//   nielsd-quant-bench --shapes 2048x8192 --dtypes q4_k,q8_0 --rounds 9

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/kernels/worker_pool.h"

namespace niels::bench {
namespace {

using daemon::kernels::Dtype;
using daemon::kernels::Matrix;
using daemon::kernels::WorkerPool;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Options {
  int threads = 2;
  int rounds = 5;
  int64_t prefill_rows = 512;
  int64_t decode_mib = 256;  // decode cycles through copies of the matrix totalling at least this
  std::vector<std::string> shapes = {"1024x1024", "3072x1024", "1024x3072", "2048x8192", "8192x2048", "151936x1024"};
  std::vector<std::string> dtypes = {"f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};
  std::string ggml_cpu_lib;
  bool json = false;
};

// Read-only bandwidth in bytes/s: each thread sums a slice of a buffer (as model_bench.cc).
class ReadBandwidth {
 public:
  ReadBandwidth(int64_t bytes, int threads) : words_(bytes / 8), threads_(threads), src_(new uint64_t[words_]), sums_(threads) {
    for (int64_t i = 0; i < words_; ++i) src_[i] = static_cast<uint64_t>(i);
  }
  double Sample() {
    const int64_t slice = words_ / threads_;
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads_; ++t) {
      workers.emplace_back([&, t] {
        const uint64_t* p = src_.get() + t * slice;
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (int64_t i = 0; i + 3 < slice; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
        sums_[t] = a + b + c + d;
      });
    }
    for (auto& w : workers) w.join();
    return static_cast<double>(slice * threads_ * 8) / Seconds(start);
  }

 private:
  int64_t words_;
  int threads_;
  std::unique_ptr<uint64_t[]> src_;
  std::vector<uint64_t> sums_;
};

// Random weight bytes of `dtype`: random levels, and scales (f16) that are small normal numbers;
// the speed does not depend on the values, and quantizing 150M floats would take minutes.
std::vector<unsigned char> RandomWeights(Dtype dtype, int64_t out, int64_t in, uint32_t seed) {
  const int64_t bytes = out * daemon::kernels::RowBytes(dtype, in);
  std::vector<unsigned char> w(static_cast<size_t>(bytes));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(w.data() + i, &r, 8);
  }
  auto set_half = [&](int64_t at) { w[at + 1] = static_cast<unsigned char>((w[at + 1] & 0x83) | 0x20); };
  const int64_t block = daemon::kernels::DtypeBlockBytes(dtype);
  const int64_t blocks = bytes / block;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * block;
    switch (dtype) {
      case Dtype::kF16: set_half(at); break;
      case Dtype::kBF16: w[at + 1] = static_cast<unsigned char>((w[at + 1] & 0x80) | 0x3c); break;
      case Dtype::kQ6_K: set_half(at + 208); break;
      case Dtype::kQ4_K:
      case Dtype::kQ5_K: set_half(at + 2); [[fallthrough]];
      default: set_half(at); break;
    }
  }
  return w;
}

struct Shape {
  int64_t out, in;
};

// ggml's dot products (dlopen'ed), for the decode comparison.
struct Ggml {
  using VecDot = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by, int nrc);
  using Quantize = void (*)(const float* x, void* y, int64_t k);
  void* library = nullptr;
  VecDot vec_dot[8] = {};
  Quantize quantize[8] = {};
  int64_t activation_bytes_per_256[8] = {};  // q8_0 blocks: 8 x 34; q8_K: 292; f16: 512

  bool Load(const std::string& path) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return false;
    if (auto init = reinterpret_cast<void (*)()>(dlsym(library, "ggml_cpu_init"))) init();
    auto sym = [&](const char* name) { return dlsym(library, name); };
    auto q8_0 = reinterpret_cast<Quantize>(sym("quantize_row_q8_0"));
    auto q8_k = reinterpret_cast<Quantize>(sym("quantize_row_q8_K"));
    // 16-bit weights: ggml rounds x to the weights' type once, then dots in that type.
    auto to_f16 = reinterpret_cast<Quantize>(sym("ggml_cpu_fp32_to_fp16"));
    auto to_bf16 = reinterpret_cast<Quantize>(sym("ggml_cpu_fp32_to_bf16"));
    const struct {
      Dtype dtype;
      const char* dot;
      Quantize quantize;
      int64_t bytes;
    } entries[] = {{Dtype::kQ8_0, "ggml_vec_dot_q8_0_q8_0", q8_0, 8 * 34}, {Dtype::kQ4_0, "ggml_vec_dot_q4_0_q8_0", q8_0, 8 * 34},
                   {Dtype::kQ4_K, "ggml_vec_dot_q4_K_q8_K", q8_k, 292},    {Dtype::kQ5_K, "ggml_vec_dot_q5_K_q8_K", q8_k, 292},
                   {Dtype::kQ6_K, "ggml_vec_dot_q6_K_q8_K", q8_k, 292},    {Dtype::kF16, "ggml_vec_dot_f16", to_f16, 512},
                   {Dtype::kBF16, "ggml_vec_dot_bf16", to_bf16, 512}};
    for (const auto& e : entries) {
      const int k = static_cast<int>(e.dtype);
      vec_dot[k] = reinterpret_cast<VecDot>(sym(e.dot));
      quantize[k] = e.quantize;
      activation_bytes_per_256[k] = e.bytes;
    }
    return true;
  }
  bool Has(Dtype dtype) const { return vec_dot[static_cast<int>(dtype)] != nullptr && quantize[static_cast<int>(dtype)] != nullptr; }
};

// One decode matrix-vector product through ggml: quantize x, then one vec_dot per output row, the
// rows in blocks of 16 handed to the pool's threads.
void GgmlDecode(const Ggml& ggml, Dtype dtype, const unsigned char* w, const Shape& s, const float* x, float* y,
                std::vector<unsigned char>& xq, WorkerPool& pool) {
  const int k = static_cast<int>(dtype);
  ggml.quantize[k](x, xq.data(), s.in);
  const size_t row_bytes = static_cast<size_t>(daemon::kernels::RowBytes(dtype, s.in));
  const int64_t blocks = (s.out + 15) / 16;
  std::atomic<int64_t> next{0};
  pool.Run([&](int, int) {
    for (int64_t b = next.fetch_add(1); b < blocks; b = next.fetch_add(1)) {
      for (int64_t o = b * 16; o < std::min(s.out, b * 16 + 16); ++o) {
        ggml.vec_dot[k](static_cast<int>(s.in), y + o, 0, w + o * row_bytes, 0, xq.data(), 0, 1);
      }
    }
  });
}

struct Figures {
  std::vector<double> decode_s, prefill_s, ggml_decode_s;
};

void Print(const Options& o, const Shape& s, Dtype dtype, const Figures& f, double read_bw) {
  const double bytes = static_cast<double>(s.out * daemon::kernels::RowBytes(dtype, s.in));
  const double decode = Median(f.decode_s), prefill = Median(f.prefill_s);
  const double gbs = bytes / decode / 1e9;
  const double gmacs = static_cast<double>(s.out * s.in * o.prefill_rows) / prefill / 1e9;
  const std::string name(daemon::kernels::DtypeName(dtype));
  const double ggml = f.ggml_decode_s.empty() ? 0.0 : Median(f.ggml_decode_s);
  if (o.json) {
    std::printf("{\"bench\":\"quant_matvec\",\"shape\":\"%lldx%lld\",\"dtype\":\"%s\",\"threads\":%d,\"weight_mb\":%.2f,"
                "\"decode_us\":%.2f,\"decode_gb_s\":%.2f,\"decode_of_read_bw\":%.3f,\"prefill_rows\":%lld,"
                "\"prefill_ms\":%.2f,\"prefill_rows_s\":%.1f,\"prefill_gmac_s\":%.2f,\"ggml_decode_gb_s\":%.2f,"
                "\"read_bw_gb_s\":%.2f}\n",
                static_cast<long long>(s.out), static_cast<long long>(s.in), name.c_str(), o.threads, bytes / 1e6,
                decode * 1e6, gbs, gbs * 1e9 / read_bw, static_cast<long long>(o.prefill_rows), prefill * 1e3,
                static_cast<double>(o.prefill_rows) / prefill, gmacs, ggml > 0 ? bytes / ggml / 1e9 : 0.0, read_bw / 1e9);
    return;
  }
  std::printf("| %lldx%lld | %s | %.1f | %.1f | %.1f | %.2f | %s | %.1f | %.0f | %.1f |\n", static_cast<long long>(s.out),
              static_cast<long long>(s.in), name.c_str(), bytes / 1e6, decode * 1e6, gbs, gbs * 1e9 / read_bw,
              ggml > 0 ? std::to_string(bytes / ggml / 1e9).substr(0, 5).c_str() : "-", prefill * 1e3,
              static_cast<double>(o.prefill_rows) / prefill, gmacs);
  std::fflush(stdout);
}

void RunShape(const Options& o, const Shape& s, const std::vector<Dtype>& dtypes, WorkerPool& pool, ReadBandwidth& bw,
              const Ggml* ggml, std::vector<double>& bw_samples) {
  struct Set {
    Dtype dtype;
    std::vector<std::vector<unsigned char>> copies;
    Figures figures;
  };
  std::vector<Set> sets;
  for (Dtype dtype : dtypes) {
    Set set{dtype, {}, {}};
    const int64_t bytes = s.out * daemon::kernels::RowBytes(dtype, s.in);
    const int64_t copies = std::max<int64_t>(1, (o.decode_mib << 20) / std::max<int64_t>(bytes, 1));
    for (int64_t c = 0; c < copies; ++c) set.copies.push_back(RandomWeights(dtype, s.out, s.in, static_cast<uint32_t>(c + 1)));
    sets.push_back(std::move(set));
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(o.prefill_rows * s.in));
  for (float& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(o.prefill_rows * s.out));
  std::vector<unsigned char> ggml_xq(static_cast<size_t>(s.in / 256 * 512 + 512));
  for (int round = 0; round < o.rounds; ++round) {
    bw_samples.push_back(bw.Sample());
    for (Set& set : sets) {
      auto decode_pass = [&] {
        const auto start = Clock::now();
        for (const auto& copy : set.copies) {
          daemon::kernels::MatVec(Matrix{copy.data(), set.dtype}, s.out, s.in, nullptr, x.data(), 1, y.data(), pool);
        }
        return Seconds(start) / static_cast<double>(set.copies.size());
      };
      decode_pass();  // warm-up: pages, the activation buffer
      set.figures.decode_s.push_back(decode_pass());
      if (ggml != nullptr && ggml->Has(set.dtype)) {
        const auto start = Clock::now();
        for (const auto& copy : set.copies) GgmlDecode(*ggml, set.dtype, copy.data(), s, x.data(), y.data(), ggml_xq, pool);
        set.figures.ggml_decode_s.push_back(Seconds(start) / static_cast<double>(set.copies.size()));
      }
      const auto start = Clock::now();
      daemon::kernels::MatVec(Matrix{set.copies[0].data(), set.dtype}, s.out, s.in, nullptr, x.data(), o.prefill_rows,
                              y.data(), pool);
      set.figures.prefill_s.push_back(Seconds(start));
    }
  }
  bw_samples.push_back(bw.Sample());
  for (const Set& set : sets) Print(o, s, set.dtype, set.figures, Median(bw_samples));
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"MatVec throughput per weight dtype: decode (1 row) and prefill rows, side by side"};
  app.add_option("--threads", o.threads, "worker threads (counting the caller)")->capture_default_str();
  app.add_option("--rounds", o.rounds, "rounds; figures are medians")->capture_default_str();
  app.add_option("--prefill-rows", o.prefill_rows, "rows of x of the prefill figure")->capture_default_str();
  app.add_option("--decode-mib", o.decode_mib, "decode cycles through matrix copies of at least this size")
      ->capture_default_str();
  app.add_option("--shapes", o.shapes, "OUTxIN shapes")->delimiter(',');
  app.add_option("--dtypes", o.dtypes, "f16, bf16, q8_0, q4_0, q5_0, q4_k, q5_k, q6_k")->delimiter(',');
  app.add_option("--ggml-cpu-lib", o.ggml_cpu_lib, "libggml-cpu-*.so: print ggml's vec_dot decode GB/s beside ours");
  app.add_flag("--json", o.json, "one JSON line per (shape, dtype)");
  CLI11_PARSE(app, argc, argv);
  std::vector<Dtype> dtypes;
  for (const auto& name : o.dtypes) {
    const auto dtype = daemon::kernels::ParseDtype(name);
    if (!dtype) {
      std::fprintf(stderr, "unknown dtype %s\n", name.c_str());
      return 2;
    }
    dtypes.push_back(*dtype);
  }
  Ggml ggml;
  if (!o.ggml_cpu_lib.empty() && !ggml.Load(o.ggml_cpu_lib)) {
    std::fprintf(stderr, "cannot load %s: %s\n", o.ggml_cpu_lib.c_str(), dlerror());
    return 2;
  }
  WorkerPool pool(o.threads);
  ReadBandwidth bw(512 << 20, o.threads);
  if (!o.json) {
    std::printf("kernels %s (block types %s), %d threads, prefill %lld rows, medians of %d rounds\n\n",
                daemon::kernels::MatVecKernelName(), daemon::kernels::simd::QuantName(), o.threads,
                static_cast<long long>(o.prefill_rows), o.rounds);
    std::printf("| shape (out x in) | dtype | weights MB | decode us | decode GB/s | of read BW | ggml decode GB/s | "
                "prefill ms | prefill rows/s | prefill GMAC/s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  }
  std::vector<double> bw_samples;
  for (const auto& text : o.shapes) {
    Shape s{};
    if (std::sscanf(text.c_str(), "%lldx%lld", reinterpret_cast<long long*>(&s.out), reinterpret_cast<long long*>(&s.in)) != 2) {
      std::fprintf(stderr, "bad shape %s (OUTxIN)\n", text.c_str());
      return 2;
    }
    RunShape(o, s, dtypes, pool, bw, ggml.library != nullptr ? &ggml : nullptr, bw_samples);
  }
  if (!o.json) std::printf("\nread bandwidth (median of %zu samples): %.1f GB/s\n", bw_samples.size(), Median(bw_samples) / 1e9);
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
