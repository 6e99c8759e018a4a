#pragma once
// Weights: the tensors of a model of the family (docs/ARCHITECTURE.md, "Model math"), under names
// of their own -- the loaders map each file format's names onto these (daemon/loaders).
//
// Matrices are kept in the file's dtype -- f32, f16, bf16 or a GGUF block type -- and, when the
// file already stores that dtype at a usable alignment, point straight into the file's memory
// mapping: nothing is copied, and the page cache's pages are shared by every process that maps the
// file. Norms and biases (a few KiB) are always f32 (widened at load when stored otherwise).
// `backing` keeps the mapping and any converted buffers alive as long as any copy of the Weights
// exists. Tensors are read-only.
//
// Shapes: V vocab, C width, L layers, H query heads, KV key/value heads, D head size, F feed-forward
// width. An optional tensor is undefined (data == nullptr and no shape) when the model has none.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/kernels/dtype.h"
#include "daemon/model/config.h"

namespace niels::daemon::model {

using kernels::Dtype;

// A read-only, row-major, contiguous tensor of one dtype (a block type only for matrices, whose
// rows are then whole blocks).
struct Tensor {
  const void* data = nullptr;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;

  bool defined() const { return data != nullptr || (!shape.empty() && numel() == 0); }
  int64_t numel() const;
  int64_t bytes() const;
  // The data as floats. REQUIRES: dtype f32.
  const float* f32() const;
  kernels::Matrix matrix() const { return {data, dtype}; }
  // Every element as float, widened or dequantized (a copy).
  std::vector<float> ToFloats() const;
};

struct BlockWeights {
  Tensor attn_norm;       // [C]             RMSNorm before attention
  Tensor wqkv;            // [H D + 2 KV D, C] q, k and v in one matrix (niels_gpt), else undefined
  Tensor wq, wk, wv;      // [H D, C], [KV D, C], [KV D, C] when not fused
  Tensor bq, bk, bv;      // [H D], [KV D], [KV D]  (config.attention_bias)
  Tensor q_norm, k_norm;  // [D]             (config.qk_norm)
  Tensor wo;              // [C, H D]
  Tensor ffn_norm;        // [C]             RMSNorm before the feed-forward
  Tensor w_gate, w_up;    // [F, C]          down(silu(gate(x)) * up(x))
  Tensor b_gate, b_up;    // [F]             (config.mlp_bias)
  Tensor w_down;          // [C, F]
  Tensor b_down;          // [C]             (config.mlp_bias)
};

struct Weights {
  Tensor tok_emb;                    // [V, C]
  std::vector<BlockWeights> blocks;  // L entries
  Tensor final_norm;                 // [C]
  Tensor lm_head;                    // [V, C] the output projection: tok_emb's own data when tied
  // [D/2] f32: RoPE pair i turns by position / (theta^(2i/D) * rope_freqs[i]) (llama3 scaling;
  // Llama3RopeFactors, or a GGUF's rope_freqs tensor); undefined without frequency scaling.
  Tensor rope_freqs;
  // The file mapping(s) and the buffers the tensors point into.
  std::vector<std::shared_ptr<const void>> backing;

  // The dtype of the token embedding (the model's dtype when it has one).
  Dtype dtype() const { return tok_emb.dtype; }
  // Total bytes of all tensors (a tied lm_head counted once): what a decode step reads.
  int64_t bytes() const;
  // Every defined tensor with its name ("tok_emb", "blocks.3.wq", "final_norm", "lm_head"), in a
  // fixed order; a tied lm_head is not visited. The tensors are views, valid while these Weights
  // (or a copy of them) live.
  void ForEach(const std::function<void(const std::string& name, const Tensor& tensor)>& visit) const;
  void ForEachMutable(const std::function<void(const std::string& name, Tensor& tensor)>& visit);
};

// The shape every tensor of a model of `config` must have, by the names of Weights::ForEach (the
// optional ones only when the config has them; lm_head only when untied; wqkv when `fused_qkv`,
// else wq, wk and wv).
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedShapes(const ModelConfig& config, bool fused_qkv);

// INVALID_ARGUMENT naming the first tensor that is missing, undefined when it must be there, or of
// another shape than `config` says (`where`: the file, for the message).
common::Status CheckShapes(const Weights& weights, const ModelConfig& config, const std::string& where);

// A copy of `weights` with the matrices (2-D tensors) in `dtype` (rounded to nearest even).
// INVALID_ARGUMENT naming the tensor when a value overflows f16. REQUIRES: dtype f32, f16 or bf16.
common::StatusOr<Weights> ConvertWeights(const Weights& weights, Dtype dtype);

// Bytes of the tensors of `weights` that lie in [begin, begin + size): with a file's mapping, what
// is used straight from the file (zero-copy) rather than converted.
int64_t BytesWithin(const Weights& weights, const void* begin, size_t size);

// The per-pair frequency divisors of llama3 rope scaling, as llama.cpp's converter computes them for
// a GGUF's rope_freqs tensor (from the f32 base frequencies; 1, `factor`, or the blend between).
// REQUIRES: config.rope_scaling.type == kLlama3.
std::vector<float> Llama3RopeFactors(const ModelConfig& config);

// Random weights with the right shapes for `config` (normal(0, std) matrices and biases, norms
// 1 + normal(0, 0.1)), f32, deterministic for a seed on every platform; q, k and v in one matrix
// when `fused_qkv` (niels_gpt's layout). For tests (a larger std makes attention peaked, so that
// position handling matters) and benchmarks.
Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std = 0.02, bool fused_qkv = true);

// Float buffers for a model built in memory (tests, training): `values` is moved into an owned
// buffer that `backing` keeps; the tensor is f32 [shape].
Tensor OwnedTensor(std::vector<float> values, std::vector<int64_t> shape,
                   std::vector<std::shared_ptr<const void>>& backing);

}  // namespace niels::daemon::model
