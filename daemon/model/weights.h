#pragma once
// Weights: the named tensors of a niels_gpt model (state_dict names of docs/ARCHITECTURE.md "Model
// math"). No libtorch (tools/torch/torch_weights.h converts to and from torch tensors for
// training and tests).
//
// The matrices (tok_emb, qkv, proj, fc_a/fc_g/fc_out weights) are kept in the model's dtype -- f32,
// f16 or bf16 -- and, when the file already stores that dtype, point straight into the safetensors
// file's memory mapping: nothing is copied, and the page cache's pages are shared by every process
// that maps the file. Norms and biases (a few KiB) are always f32 (widened at load when stored in
// 16 bits). `backing` keeps the mapping and any converted buffers alive as long as any copy of the
// Weights exists. Tensors are read-only.

#include <cstdint>
#include <filesystem>
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

// A read-only, row-major, contiguous tensor of f32, f16 or bf16 elements.
struct Tensor {
  const void* data = nullptr;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;

  bool defined() const { return data != nullptr || numel() == 0; }
  int64_t numel() const;
  int64_t bytes() const { return numel() * kernels::DtypeSize(dtype); }
  // The data as floats. REQUIRES: dtype f32.
  const float* f32() const;
  kernels::Matrix matrix() const { return {data, dtype}; }
  // Every element as float, widened (a copy).
  std::vector<float> ToFloats() const;
};

struct BlockWeights {
  Tensor ln1;       // [C]          blocks.{i}.ln1.weight
  Tensor qkv;       // [3C, C]      blocks.{i}.attn.qkv.weight
  Tensor proj;      // [C, C]       blocks.{i}.attn.proj.weight
  Tensor ln2;       // [C]          blocks.{i}.ln2.weight
  Tensor fc_a_w;    // [d_ff, C]    blocks.{i}.mlp.fc_a.weight
  Tensor fc_a_b;    // [d_ff]       blocks.{i}.mlp.fc_a.bias
  Tensor fc_g_w;    // [d_ff, C]    blocks.{i}.mlp.fc_g.weight
  Tensor fc_g_b;    // [d_ff]       blocks.{i}.mlp.fc_g.bias
  Tensor fc_out_w;  // [C, d_ff]    blocks.{i}.mlp.fc_out.weight
  Tensor fc_out_b;  // [C]          blocks.{i}.mlp.fc_out.bias
};

struct Weights {
  Tensor tok_emb;                    // [V, C]  tok_emb.weight (also the tied lm_head)
  std::vector<BlockWeights> blocks;  // L entries
  Tensor ln_f;                       // [C]     ln_f.weight
  // The file mapping and the buffers the tensors point into.
  std::vector<std::shared_ptr<const void>> backing;

  // The dtype of the matrices (norms and biases are f32).
  Dtype dtype() const { return tok_emb.dtype; }
  // Total bytes of all tensors (what a decode step reads).
  int64_t bytes() const;
  // Every tensor with its state_dict name, in a fixed order (lm_head.weight not included). The
  // tensors are views: valid while these Weights (or a copy of them) live.
  std::vector<std::pair<std::string, Tensor>> Named() const;
  // True for the names whose tensors are matrices (kept in the model's dtype).
  static bool IsMatrix(const std::string& name);
};

struct LoadOptions {
  // The dtype the matrices are kept in; nullopt = the file's (no conversion, no copy). A file of
  // another dtype is converted at load; to f16 a value beyond f16's range is refused.
  std::optional<Dtype> dtype;
};

// Loads and checks model.safetensors against `config`. Every failure is INVALID_ARGUMENT (NOT_FOUND
// for a missing file) with a message naming the file and the tensor: missing or extra tensor, wrong
// shape, a dtype other than F32/F16/BF16, tensors of different dtypes (a mixed file), header longer
// than the file, data offsets past the end (a truncated file), lm_head.weight present but not equal
// to tok_emb.weight, a value that overflows the requested f16.
common::StatusOr<Weights> LoadWeights(const std::filesystem::path& safetensors_path, const ModelConfig& config,
                                      const LoadOptions& options = {});

// A copy of `weights` with the matrices in `dtype` (rounded to nearest even). INVALID_ARGUMENT naming
// the tensor when a value overflows f16.
common::StatusOr<Weights> ConvertWeights(const Weights& weights, Dtype dtype);

// Writes `weights` as safetensors (with no lm_head.weight): every tensor in `dtype` (default: the
// matrices' own dtype; norms and biases then too). For tests, tools and benchmarks.
common::Status SaveWeights(const Weights& weights, const std::filesystem::path& safetensors_path,
                           std::optional<Dtype> dtype = std::nullopt);

// Bytes of the tensors of `weights` that lie in [begin, begin + size): with a file's mapping, what
// is used straight from the file (zero-copy) rather than converted.
int64_t BytesWithin(const Weights& weights, const void* begin, size_t size);

// Random weights with the right shapes (normal(0, std) matrices, biases normal(0, std), norms
// 1 + normal(0, 0.1)), f32, deterministic for a seed on every platform. For tests (a larger std
// makes attention peaked, so that position handling matters) and benchmarks.
Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std = 0.02);

// Float buffers for a model built in memory (tests, training): `values` is moved into an owned
// buffer that `backing` keeps; the tensor is f32 [shape].
Tensor OwnedTensor(std::vector<float> values, std::vector<int64_t> shape,
                   std::vector<std::shared_ptr<const void>>& backing);

}  // namespace niels::daemon::model
