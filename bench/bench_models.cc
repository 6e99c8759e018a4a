#include "bench/bench_models.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/normal_draws.h"

namespace niels::bench {
namespace {

using daemon::kernels::Dtype;
using daemon::model::Architecture;
using daemon::model::ModelConfig;
using daemon::model::Tensor;
using daemon::model::Weights;


// The dtype of each kind of matrix in a mix.
enum class Kind { kEmbedding, kAttentionV, kFfnDown, kOther };

// llama.cpp's use_more_bits(i_layer, n_layers).
bool UseMoreBits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

Dtype ChosenDtype(const std::string& mix, Kind kind, int64_t layer, int64_t layers) {
  if (mix == "q4_k_m") {
    if (kind == Kind::kEmbedding) return Dtype::kQ6_K;
    if ((kind == Kind::kAttentionV || kind == Kind::kFfnDown) && UseMoreBits(layer, layers)) return Dtype::kQ6_K;
    return Dtype::kQ4_K;
  }
  const Dtype dtype = *daemon::kernels::ParseDtype(mix);
  if (kind == Kind::kEmbedding && daemon::kernels::IsQuantized(dtype) && dtype != Dtype::kQ8_0) return Dtype::kQ6_K;
  return dtype;
}

// The dtype of a matrix of rows of `cols` values: a q4_k or q6_k row that is not whole 256-blocks
// falls back to q5_0 or q8_0, as llama.cpp's recipe (and niels-quantize's FallbackType) does. (Its
// q5_k -> q5_1 is not one of nielsd's types: WeightMixProblem reports it.)
Dtype DtypeIn(const std::string& mix, Kind kind, int64_t layer, int64_t layers, int64_t cols) {
  const Dtype dtype = ChosenDtype(mix, kind, layer, layers);
  if (cols % daemon::kernels::DtypeBlockElements(dtype) == 0) return dtype;
  if (dtype == Dtype::kQ6_K) return Dtype::kQ8_0;
  if (dtype == Dtype::kQ4_K) return Dtype::kQ5_0;
  return dtype;
}

class Builder {
 public:
  Builder(uint64_t seed, int threads) : draw_(seed), threads_(threads > 0 ? threads : 1) {}

  Tensor Vector(int64_t n, double mean, double std, Weights& w) {
    std::vector<float> values(static_cast<size_t>(n));
    draw_.Fill(values.data(), n, mean, std);
    return daemon::model::OwnedTensor(std::move(values), {n}, w.backing);
  }

  // A [rows, cols] matrix drawn with std `std`, stored in `dtype`.
  Tensor Matrix(int64_t rows, int64_t cols, double std, Dtype dtype, Weights& w) {
    std::vector<float> values(static_cast<size_t>(rows * cols));
    draw_.Fill(values.data(), rows * cols, 0.0, std);
    if (dtype == Dtype::kF32) return daemon::model::OwnedTensor(std::move(values), {rows, cols}, w.backing);
    // The quantizers write whole blocks: a partial one would run past the buffer.
    if (cols % daemon::kernels::DtypeBlockElements(dtype) != 0) {
      std::fprintf(stderr, "bench: %s rows of %lld values are not whole blocks\n",
                   std::string(daemon::kernels::DtypeName(dtype)).c_str(), static_cast<long long>(cols));
      std::abort();
    }
    const int64_t row_bytes = daemon::kernels::RowBytes(dtype, cols);
    auto buffer = std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(rows * row_bytes));
    // Rows split among threads (the block quantizers are scalar).
    std::vector<std::thread> workers;
    for (int t = 0; t < threads_; ++t) {
      const int64_t begin = rows * t / threads_, end = rows * (t + 1) / threads_;
      workers.emplace_back([&, begin, end] {
        daemon::kernels::simd::FromFloat(values.data() + begin * cols, (end - begin) * cols, dtype,
                                         buffer->data() + begin * row_bytes);
      });
    }
    for (auto& worker : workers) worker.join();
    const void* data = buffer->data();
    w.backing.push_back(std::shared_ptr<const void>(buffer, data));
    return Tensor{data, dtype, {rows, cols}};
  }

 private:
  daemon::model::NormalDraws draw_;
  int threads_;
};

}  // namespace

std::optional<ModelConfig> PresetConfig(const std::string& name) {
  ModelConfig c;
  if (name == "personal") {
    c.vocab_size = 16000, c.context = 512, c.width = 384, c.layers = 8, c.heads = 6, c.d_ff = 1152;
  } else if (name == "base") {
    c.vocab_size = 16000, c.context = 1024, c.width = 512, c.layers = 8, c.heads = 8, c.d_ff = 1536;
  } else if (name == "qwen3-0.6b") {
    c.architecture = Architecture::kQwen3;
    c.vocab_size = 151936, c.context = 8192, c.width = 1024, c.layers = 28, c.heads = 16, c.d_ff = 3072;
    c.kv_heads = 8, c.head_size = 128, c.rope_theta = 1e6, c.rms_norm_eps = 1e-6;
    c.rope_pairs = daemon::model::RopePairs::kHalves;
    c.qk_norm = true, c.mlp_bias = false, c.tied_embeddings = true;
  } else if (name == "llama3.2-1b") {
    c.architecture = Architecture::kLlama;
    c.vocab_size = 128256, c.context = 8192, c.width = 2048, c.layers = 16, c.heads = 32, c.d_ff = 8192;
    c.kv_heads = 8, c.head_size = 64, c.rope_theta = 500000.0, c.rms_norm_eps = 1e-5;
    c.rope_pairs = daemon::model::RopePairs::kHalves;
    c.rope_scaling = {.type = daemon::model::RopeScaling::Type::kLlama3,
                      .factor = 32.0,
                      .low_freq_factor = 1.0,
                      .high_freq_factor = 4.0,
                      .original_context = 8192};
    c.mlp_bias = false, c.tied_embeddings = true, c.qk_rows_interleaved = true;
  } else {
    return std::nullopt;
  }
  c.name = name;
  return c;
}

bool IsWeightMix(const std::string& name) {
  for (const char* mix : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m"}) {
    if (name == mix) return true;
  }
  return false;
}

std::optional<std::string> WeightMixProblem(const ModelConfig& config, const std::string& mix) {
  const int64_t C = config.width, F = config.d_ff, HD = config.q_width(), L = config.layers;
  // Every (kind, row length) RandomWeightsInMix draws; wo's rows are HD long, w_down's F.
  const std::pair<Kind, int64_t> matrices[] = {
      {Kind::kEmbedding, C}, {Kind::kOther, C}, {Kind::kOther, HD}, {Kind::kAttentionV, C}, {Kind::kFfnDown, F}};
  for (int64_t layer = 0; layer < L; ++layer) {
    for (const auto& [kind, cols] : matrices) {
      const Dtype dtype = DtypeIn(mix, kind, layer, L, cols);
      const int64_t block = daemon::kernels::DtypeBlockElements(dtype);
      if (cols % block != 0) {
        return fmt::format("the {} mix has {} rows of {} values, not whole {}-value blocks (llama.cpp's recipe "
                           "stores such rows as q5_1, which nielsd's kernels do not run)",
                           mix, daemon::kernels::DtypeName(dtype), cols, block);
      }
    }
  }
  return std::nullopt;
}

Weights RandomWeightsInMix(const ModelConfig& config, const std::string& mix, uint64_t seed, int threads) {
  const int64_t C = config.width, F = config.d_ff, V = config.vocab_size, D = config.head_dim();
  const int64_t HD = config.q_width(), KVD = config.kv_width(), L = config.layers;
  const bool fused = config.architecture == Architecture::kNielsGpt;
  Builder make(seed, threads);
  Weights w;
  auto gain = [](double g, int64_t cols) { return g / std::sqrt(static_cast<double>(cols)); };
  auto dtype = [&](Kind kind, int64_t layer, int64_t cols) { return DtypeIn(mix, kind, layer, L, cols); };
  w.tok_emb = make.Matrix(V, C, 4.0 / std::sqrt(static_cast<double>(C)), dtype(Kind::kEmbedding, 0, C), w);
  for (int64_t i = 0; i < L; ++i) {
    daemon::model::BlockWeights b;
    b.attn_norm = make.Vector(C, 1.0, 0.2, w);
    if (fused) {
      b.wqkv = make.Matrix(HD + 2 * KVD, C, gain(1.0, C), dtype(Kind::kOther, i, C), w);
    } else {
      b.wq = make.Matrix(HD, C, gain(2.0, C), dtype(Kind::kOther, i, C), w);
      b.wk = make.Matrix(KVD, C, gain(2.0, C), dtype(Kind::kOther, i, C), w);
      b.wv = make.Matrix(KVD, C, gain(1.0, C), dtype(Kind::kAttentionV, i, C), w);
    }
    if (config.attention_bias) {
      b.bq = make.Vector(HD, 0.0, 0.5, w);
      b.bk = make.Vector(KVD, 0.0, 0.5, w);
      b.bv = make.Vector(KVD, 0.0, 0.5, w);
    }
    if (config.qk_norm) {
      b.q_norm = make.Vector(D, 2.0, 0.4, w);
      b.k_norm = make.Vector(D, 2.0, 0.4, w);
    }
    b.wo = make.Matrix(C, HD, gain(1.0, HD), dtype(Kind::kOther, i, HD), w);
    b.ffn_norm = make.Vector(C, 1.0, 0.2, w);
    b.w_gate = make.Matrix(F, C, gain(2.0, C), dtype(Kind::kOther, i, C), w);
    b.w_up = make.Matrix(F, C, gain(1.0, C), dtype(Kind::kOther, i, C), w);
    b.w_down = make.Matrix(C, F, gain(1.0, F), dtype(Kind::kFfnDown, i, F), w);
    if (config.mlp_bias) {
      b.b_gate = make.Vector(F, 0.0, 0.5, w);
      b.b_up = make.Vector(F, 0.0, 0.5, w);
      b.b_down = make.Vector(C, 0.0, 0.5, w);
    }
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = make.Vector(C, 1.0, 0.2, w);
  w.lm_head = config.tied_embeddings ? w.tok_emb : make.Matrix(V, C, gain(4.0, C), dtype(Kind::kEmbedding, 0, C), w);
  if (config.rope_scaling.type == daemon::model::RopeScaling::Type::kLlama3) {
    w.rope_freqs = daemon::model::OwnedTensor(daemon::model::Llama3RopeFactors(config), {D / 2}, w.backing);
  }
  return w;
}

}  // namespace niels::bench
