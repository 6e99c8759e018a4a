#include "daemon/model/weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/normal_draws.h"

namespace niels::daemon::model {
namespace {

using common::Status;
using common::StatusOr;

// Calls f(name, tensor) for every tensor slot of `w` (defined or not) in the fixed order; W is
// Weights or const Weights. A tied lm_head is skipped.
template <typename W, typename F>
void VisitSlots(W& w, F&& f) {
  f(std::string("tok_emb"), w.tok_emb);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    auto& b = w.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    f(p + "attn_norm", b.attn_norm);
    f(p + "wqkv", b.wqkv);
    f(p + "wq", b.wq);
    f(p + "wk", b.wk);
    f(p + "wv", b.wv);
    f(p + "bq", b.bq);
    f(p + "bk", b.bk);
    f(p + "bv", b.bv);
    f(p + "q_norm", b.q_norm);
    f(p + "k_norm", b.k_norm);
    f(p + "wo", b.wo);
    f(p + "ffn_norm", b.ffn_norm);
    f(p + "w_gate", b.w_gate);
    f(p + "b_gate", b.b_gate);
    f(p + "w_up", b.w_up);
    f(p + "b_up", b.b_up);
    f(p + "w_down", b.w_down);
    f(p + "b_down", b.b_down);
  }
  f(std::string("final_norm"), w.final_norm);
  if (w.lm_head.data != w.tok_emb.data || w.lm_head.shape != w.tok_emb.shape) f(std::string("lm_head"), w.lm_head);
  f(std::string("rope_freqs"), w.rope_freqs);
}

// An owned, uninitialized buffer of `bytes` bytes, kept alive by `backing`.
void* NewBuffer(int64_t bytes, std::vector<std::shared_ptr<const void>>& backing) {
  std::shared_ptr<std::byte[]> buffer(new std::byte[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
  void* data = buffer.get();
  backing.push_back(std::shared_ptr<const void>(std::move(buffer), data));
  return data;
}


}  // namespace

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Tensor::bytes() const {
  if (shape.empty()) return 0;
  return numel() / shape.back() * kernels::RowBytes(dtype, shape.back());
}

const float* Tensor::f32() const {
  if (dtype != Dtype::kF32) throw std::logic_error("Tensor::f32 on a " + std::string(kernels::DtypeName(dtype)) + " tensor");
  return static_cast<const float*>(data);
}

std::vector<float> Tensor::ToFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) kernels::simd::ToFloat(data, dtype, numel(), out.data());
  return out;
}

int64_t Weights::bytes() const {
  int64_t total = 0;
  ForEach([&](const std::string&, const Tensor& t) { total += t.bytes(); });
  return total;
}

void Weights::ForEach(const std::function<void(const std::string& name, const Tensor& tensor)>& visit) const {
  VisitSlots(*this, [&](const std::string& name, const Tensor& t) {
    if (t.defined()) visit(name, t);
  });
}

void Weights::ForEachMutable(const std::function<void(const std::string& name, Tensor& tensor)>& visit) {
  VisitSlots(*this, [&](const std::string& name, Tensor& t) {
    if (t.defined()) visit(name, t);
  });
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedShapes(const ModelConfig& c, bool fused_qkv) {
  const int64_t C = c.width, F = c.d_ff, D = c.head_dim(), HD = c.q_width(), KVD = c.kv_width();
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"tok_emb", {c.vocab_size, C}});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    shapes.push_back({p + "attn_norm", {C}});
    if (fused_qkv) {
      shapes.push_back({p + "wqkv", {HD + 2 * KVD, C}});
    } else {
      shapes.push_back({p + "wq", {HD, C}});
      shapes.push_back({p + "wk", {KVD, C}});
      shapes.push_back({p + "wv", {KVD, C}});
    }
    if (c.attention_bias) {
      shapes.push_back({p + "bq", {HD}});
      shapes.push_back({p + "bk", {KVD}});
      shapes.push_back({p + "bv", {KVD}});
    }
    if (c.qk_norm) {
      shapes.push_back({p + "q_norm", {D}});
      shapes.push_back({p + "k_norm", {D}});
    }
    shapes.push_back({p + "wo", {C, HD}});
    shapes.push_back({p + "ffn_norm", {C}});
    shapes.push_back({p + "w_gate", {F, C}});
    if (c.mlp_bias) shapes.push_back({p + "b_gate", {F}});
    shapes.push_back({p + "w_up", {F, C}});
    if (c.mlp_bias) shapes.push_back({p + "b_up", {F}});
    shapes.push_back({p + "w_down", {C, F}});
    if (c.mlp_bias) shapes.push_back({p + "b_down", {C}});
  }
  shapes.push_back({"final_norm", {C}});
  if (!c.tied_embeddings) shapes.push_back({"lm_head", {c.vocab_size, C}});
  if (c.rope_scaling.type != RopeScaling::Type::kNone) shapes.push_back({"rope_freqs", {D / 2}});
  return shapes;
}

Status CheckShapes(const Weights& weights, const ModelConfig& config, const std::string& where) {
  if (static_cast<int64_t>(weights.blocks.size()) != config.layers) {
    return Status::InvalidArgument(
        fmt::format("{}: {} blocks of weights for a model of L = {}", where, weights.blocks.size(), config.layers));
  }
  const bool fused = !weights.blocks.empty() && weights.blocks[0].wqkv.defined();
  std::map<std::string, const Tensor*> present;
  weights.ForEach([&](const std::string& name, const Tensor& t) { present[name] = &t; });
  for (const auto& [name, shape] : ExpectedShapes(config, fused)) {
    auto it = present.find(name);
    if (it == present.end()) {
      return Status::InvalidArgument(
          fmt::format("{}: missing tensor {} {}", where, name, fmt::join(shape, "x")));
    }
    if (it->second->shape != shape) {
      return Status::InvalidArgument(fmt::format("{}: tensor {} has shape [{}], expected [{}]", where, name,
                                                 fmt::join(it->second->shape, ", "), fmt::join(shape, ", ")));
    }
    present.erase(it);
  }
  if (!present.empty()) {
    return Status::InvalidArgument(fmt::format("{}: tensor {} is not part of a {} model with these settings", where,
                                               present.begin()->first, ArchitectureName(config.architecture)));
  }
  if (config.tied_embeddings && weights.lm_head.data != weights.tok_emb.data) {
    return Status::InvalidArgument(where + ": the output projection is tied to tok_emb but points elsewhere");
  }
  return Status::Ok();
}

StatusOr<Weights> ConvertWeights(const Weights& weights, Dtype dtype) {
  if (kernels::IsQuantized(dtype)) return Status::InvalidArgument("ConvertWeights: to f32, f16 or bf16 only");
  Weights out = weights;
  const bool tied = out.lm_head.data == out.tok_emb.data;
  Status status = Status::Ok();
  out.ForEachMutable([&](const std::string& name, Tensor& t) {
    if (!status.ok() || t.shape.size() != 2 || t.dtype == dtype) return;
    const int64_t n = t.numel();
    std::vector<float> floats = t.ToFloats();
    void* data = NewBuffer(n * kernels::DtypeSize(dtype), out.backing);
    kernels::simd::FromFloat(floats.data(), n, dtype, data);
    if (dtype == Dtype::kF16) {
      for (int64_t i = 0; i < n; ++i) {
        if (std::isfinite(floats[i]) && !std::isfinite(kernels::ElementToFloat(data, dtype, i))) {
          status = Status::InvalidArgument(fmt::format(
              "tensor {} has a value ({}) beyond f16's range (65504); keep it in f32 or bf16", name, floats[i]));
          return;
        }
      }
    }
    t = Tensor{data, dtype, t.shape};
  });
  NIELS_RETURN_IF_ERROR(status);
  if (tied) out.lm_head = out.tok_emb;
  return out;
}

int64_t BytesWithin(const Weights& weights, const void* begin, size_t size) {
  const auto* first = static_cast<const std::byte*>(begin);
  int64_t total = 0;
  weights.ForEach([&](const std::string&, const Tensor& t) {
    const auto* data = static_cast<const std::byte*>(t.data);
    if (data >= first && data + t.bytes() <= first + size) total += t.bytes();
  });
  return total;
}

std::vector<float> Llama3RopeFactors(const ModelConfig& config) {
  const RopeScaling& r = config.rope_scaling;
  const int64_t D = config.head_dim();
  const double low_freq_wavelen = static_cast<double>(r.original_context) / r.low_freq_factor;
  const double high_freq_wavelen = static_cast<double>(r.original_context) / r.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < D / 2; ++i) {
    // The base frequency in f32, as the converter has it: 1 / theta^(2i/D).
    const float freq = 1.0f / std::pow(static_cast<float>(config.rope_theta),
                                       static_cast<float>(2 * i) / static_cast<float>(D));
    const double wavelen = 2.0 * M_PI / static_cast<double>(freq);
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (static_cast<double>(r.original_context) / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / r.factor + smooth)));
    }
  }
  return factors;
}

Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std, bool fused_qkv) {
  const int64_t C = config.width, F = config.d_ff, D = config.head_dim(), HD = config.q_width(),
                KVD = config.kv_width();
  NormalDraws draw(seed);
  Weights w;
  auto matrix = [&](int64_t rows, int64_t cols) { return OwnedTensor(draw.Draw(rows * cols, 0.0, std), {rows, cols}, w.backing); };
  auto bias = [&](int64_t n) { return OwnedTensor(draw.Draw(n, 0.0, std), {n}, w.backing); };
  auto norm = [&](int64_t n) { return OwnedTensor(draw.Draw(n, 1.0, 0.1), {n}, w.backing); };
  w.tok_emb = matrix(config.vocab_size, C);
  for (int64_t i = 0; i < config.layers; ++i) {
    BlockWeights b;
    // niels_gpt's state_dict order (ln1, qkv, proj, ln2, fc_a, fc_g, fc_out), the others after it.
    b.attn_norm = norm(C);
    if (fused_qkv) {
      b.wqkv = matrix(HD + 2 * KVD, C);
    } else {
      b.wq = matrix(HD, C);
      b.wk = matrix(KVD, C);
      b.wv = matrix(KVD, C);
    }
    b.wo = matrix(C, HD);
    b.ffn_norm = norm(C);
    b.w_up = matrix(F, C);
    if (config.mlp_bias) b.b_up = bias(F);
    b.w_gate = matrix(F, C);
    if (config.mlp_bias) b.b_gate = bias(F);
    b.w_down = matrix(C, F);
    if (config.mlp_bias) b.b_down = bias(C);
    if (config.attention_bias) {
      b.bq = bias(HD);
      b.bk = bias(KVD);
      b.bv = bias(KVD);
    }
    if (config.qk_norm) {
      b.q_norm = norm(D);
      b.k_norm = norm(D);
    }
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = norm(C);
  w.lm_head = config.tied_embeddings ? w.tok_emb : matrix(config.vocab_size, C);
  if (config.rope_scaling.type == RopeScaling::Type::kLlama3) {
    w.rope_freqs = OwnedTensor(Llama3RopeFactors(config), {config.head_dim() / 2}, w.backing);
  }
  return w;
}

Tensor OwnedTensor(std::vector<float> values, std::vector<int64_t> shape,
                   std::vector<std::shared_ptr<const void>>& backing) {
  auto owned = std::make_shared<const std::vector<float>>(std::move(values));
  const void* data = owned->data();
  backing.push_back(std::shared_ptr<const void>(owned, data));
  return Tensor{data, Dtype::kF32, std::move(shape)};
}

}  // namespace niels::daemon::model
