// See gguf_test_model.h. Moved here from gguf_logits.cc (niels_gguf_logits) to be shared with
// niels_quant_accuracy.
#include "tests/tools/gguf_test_model.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/formats/gguf_file.h"
#include "daemon/model/weights.h"

namespace niels::testing {
namespace {

namespace formats = daemon::formats;
namespace kernels = daemon::kernels;
namespace model = daemon::model;
using common::Status;
using common::StatusOr;

StatusOr<kernels::Dtype> DtypeOf(formats::GgmlType type, std::string_view name) {
  switch (type) {
    case formats::GgmlType::kF32:
      return kernels::Dtype::kF32;
    case formats::GgmlType::kF16:
      return kernels::Dtype::kF16;
    case formats::GgmlType::kBF16:
      return kernels::Dtype::kBF16;
    case formats::GgmlType::kQ8_0:
      return kernels::Dtype::kQ8_0;
    case formats::GgmlType::kQ4_0:
      return kernels::Dtype::kQ4_0;
    case formats::GgmlType::kQ4_K:
      return kernels::Dtype::kQ4_K;
    case formats::GgmlType::kQ5_K:
      return kernels::Dtype::kQ5_K;
    case formats::GgmlType::kQ6_K:
      return kernels::Dtype::kQ6_K;
    case formats::GgmlType::kQ5_0:
      return kernels::Dtype::kQ5_0;
    default:
      return Status::InvalidArgument("tensor " + std::string(name) + " is " + std::string(formats::GgmlTypeName(type)) +
                                     ": nielsd has no kernel for it");
  }
}

class WeightMapper {
 public:
  explicit WeightMapper(std::shared_ptr<const formats::GgufFile> file) : file_(std::move(file)) {}

  // The tensor `name` as a view into the mapping (undefined when absent and !required).
  StatusOr<model::Tensor> Get(const std::string& name, bool required = true) const {
    const formats::GgufTensorInfo* t = file_->FindTensor(name);
    if (t == nullptr) {
      if (required) return Status::InvalidArgument(file_->path().string() + ": no tensor " + name);
      return model::Tensor{};
    }
    auto dtype = DtypeOf(t->type, t->name);
    if (!dtype.ok()) return dtype.status();
    if (t->n_dims == 1 && *dtype != kernels::Dtype::kF32) {
      return Status::InvalidArgument(name + ": a 1-D tensor that is not f32");
    }
    return model::Tensor{file_->TensorData(*t), *dtype, t->Shape()};
  }

 private:
  std::shared_ptr<const formats::GgufFile> file_;
};

StatusOr<model::ModelConfig> ConfigOf(const formats::GgufFile& f, int64_t context) {
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  const std::string a(*arch);
  model::ModelConfig c;
  if (a == "llama") {
    c.architecture = model::Architecture::kLlama;
    c.qk_rows_interleaved = true;  // llama.cpp's llama: RoPE over adjacent stored rows
  } else if (a == "qwen2") {
    c.architecture = model::Architecture::kQwen2;
  } else if (a == "qwen3") {
    c.architecture = model::Architecture::kQwen3;
  } else {
    return Status::InvalidArgument("architecture " + a + " is not llama, qwen2 or qwen3");
  }
  c.rope_pairs = model::RopePairs::kHalves;
  auto uint_key = [&](const std::string& key, int64_t* out, bool required = true) -> Status {
    auto v = f.GetUint(a + "." + key);
    if (v.ok()) *out = static_cast<int64_t>(*v);
    return v.ok() || !required ? Status::Ok() : v.status();
  };
  NIELS_RETURN_IF_ERROR(uint_key("embedding_length", &c.width));
  NIELS_RETURN_IF_ERROR(uint_key("block_count", &c.layers));
  NIELS_RETURN_IF_ERROR(uint_key("feed_forward_length", &c.d_ff));
  NIELS_RETURN_IF_ERROR(uint_key("attention.head_count", &c.heads));
  NIELS_RETURN_IF_ERROR(uint_key("attention.head_count_kv", &c.kv_heads, false));
  NIELS_RETURN_IF_ERROR(uint_key("attention.key_length", &c.head_size, false));
  auto theta = f.GetFloat(a + ".rope.freq_base");
  if (theta.ok()) c.rope_theta = *theta;
  auto eps = f.GetFloat(a + ".attention.layer_norm_rms_epsilon");
  if (eps.ok()) c.rms_norm_eps = *eps;
  const formats::GgufTensorInfo* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr || emb->n_dims != 2) return Status::InvalidArgument("no 2-D token_embd.weight");
  c.vocab_size = emb->dims[1];
  // The file's context_length (when it has one) caps the context asked for.
  auto file_context = f.GetUint(a + ".context_length");
  c.context = file_context.ok() ? std::min<int64_t>(context, static_cast<int64_t>(*file_context)) : context;
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  c.attention_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.FindTensor("blk.0.attn_q_norm.weight") != nullptr;
  c.mlp_bias = f.FindTensor("blk.0.ffn_up.bias") != nullptr;
  // llama3 rope scaling: the file's rope_freqs tensor holds the per-pair divisors (Weights::rope_freqs).
  if (f.FindTensor("rope_freqs.weight") != nullptr) c.rope_scaling.type = model::RopeScaling::Type::kLlama3;
  NIELS_RETURN_IF_ERROR(model::ValidateModelConfig(c, f.path().string()));
  return c;
}

StatusOr<model::Weights> WeightsOf(std::shared_ptr<const formats::GgufFile> file, const model::ModelConfig& c) {
  const WeightMapper m(file);
  model::Weights w;
  auto set = [&](model::Tensor* out, const std::string& name, bool required) -> Status {
    auto t = m.Get(name, required);
    if (!t.ok()) return t.status();
    *out = *t;
    return Status::Ok();
  };
  NIELS_RETURN_IF_ERROR(set(&w.tok_emb, "token_embd.weight", true));
  NIELS_RETURN_IF_ERROR(set(&w.final_norm, "output_norm.weight", true));
  NIELS_RETURN_IF_ERROR(set(&w.lm_head, c.tied_embeddings ? "token_embd.weight" : "output.weight", true));
  NIELS_RETURN_IF_ERROR(set(&w.rope_freqs, "rope_freqs.weight", false));
  w.blocks.resize(static_cast<size_t>(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    model::BlockWeights& b = w.blocks[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    for (auto [out, name, required] :
         std::vector<std::tuple<model::Tensor*, std::string, bool>>{{&b.attn_norm, "attn_norm.weight", true},
                                                                    {&b.wq, "attn_q.weight", true},
                                                                    {&b.wk, "attn_k.weight", true},
                                                                    {&b.wv, "attn_v.weight", true},
                                                                    {&b.bq, "attn_q.bias", c.attention_bias},
                                                                    {&b.bk, "attn_k.bias", c.attention_bias},
                                                                    {&b.bv, "attn_v.bias", c.attention_bias},
                                                                    {&b.q_norm, "attn_q_norm.weight", c.qk_norm},
                                                                    {&b.k_norm, "attn_k_norm.weight", c.qk_norm},
                                                                    {&b.wo, "attn_output.weight", true},
                                                                    {&b.ffn_norm, "ffn_norm.weight", true},
                                                                    {&b.w_gate, "ffn_gate.weight", true},
                                                                    {&b.w_up, "ffn_up.weight", true},
                                                                    {&b.w_down, "ffn_down.weight", true},
                                                                    {&b.b_gate, "ffn_gate.bias", c.mlp_bias},
                                                                    {&b.b_up, "ffn_up.bias", c.mlp_bias},
                                                                    {&b.b_down, "ffn_down.bias", c.mlp_bias}}) {
      NIELS_RETURN_IF_ERROR(set(out, p + name, required));
    }
  }
  w.backing.push_back(std::move(file));
  NIELS_RETURN_IF_ERROR(model::CheckShapes(w, c, "GGUF"));
  return w;
}

}  // namespace

StatusOr<GgufTestModel> LoadGgufTestModel(const std::string& path, int64_t context, bool dequantize,
                                          std::shared_ptr<kernels::WorkerPool> pool) {
  auto file = formats::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto config = ConfigOf(**file, context);
  if (!config.ok()) return config.status();
  auto weights = WeightsOf(*file, *config);
  if (!weights.ok()) return weights.status();
  if (dequantize) {
    weights->ForEachMutable([&](const std::string&, model::Tensor& t) {
      if (!kernels::IsQuantized(t.dtype)) return;
      t = model::OwnedTensor(t.ToFloats(), t.shape, weights->backing);
    });
    if (config->tied_embeddings) weights->lm_head = weights->tok_emb;
  }
  if (pool == nullptr) pool = std::make_shared<kernels::WorkerPool>(1);
  GgufTestModel out;
  out.config = *config;
  out.transformer = std::make_unique<model::Transformer>(*config, std::move(*weights), std::move(pool));
  return out;
}

}  // namespace niels::testing
