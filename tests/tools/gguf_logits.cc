// niels_gguf_logits: nielsd's teacher-forced logits on a GGUF file of the llama, qwen2 or qwen3
// architecture (f32/f16/bf16 or quantized by niels-quantize), for quantize_reference_test.py.
//
//   niels_gguf_logits GGUF PROMPTS.json OUT.bin [--dequantize]
//
// PROMPTS: [[token ids], ...]. OUT: for every position of every prompt in order, one row of V
// float32 (little-endian) = logit - max(logit) -- the layout of llamacpp_reference.mjs's
// logits_file, so the two compare row by row. --dequantize: the block-type matrices widened to f32
// first (model::Tensor::ToFloats), so the products are float ones on the exact dequantized weights
// (no 8-bit activations). One thread. Exit status 0, 1 with the reason on stderr.
//
// The model runs on nielsd's own forward pass (model::Transformer on daemon/kernels), its weights
// read straight from the file's mapping in the file's types. This is a test harness, not a loader:
// it maps llama.cpp's tensor names and hyperparameter keys onto model::Weights and ModelConfig for
// the files the quantize test makes (convert_hf_to_gguf.py's layout, niels-export's), and nothing
// more (no tokenizer, no validation beyond model::CheckShapes). A tensor type nielsd has no kernel
// for (q5_0, q5_1, ...) is an error naming it.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "daemon/formats/gguf_file.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"

namespace {

namespace formats = niels::daemon::formats;
namespace kernels = niels::daemon::kernels;
namespace model = niels::daemon::model;
using niels::common::Status;
using niels::common::StatusOr;

// The positions the test's prompts need; the files' context_length may be 128k.
constexpr int64_t kContext = 256;

StatusOr<kernels::Dtype> DtypeOf(formats::GgmlType type, std::string_view name) {
  switch (type) {
    case formats::GgmlType::kF32: return kernels::Dtype::kF32;
    case formats::GgmlType::kF16: return kernels::Dtype::kF16;
    case formats::GgmlType::kBF16: return kernels::Dtype::kBF16;
    case formats::GgmlType::kQ8_0: return kernels::Dtype::kQ8_0;
    case formats::GgmlType::kQ4_0: return kernels::Dtype::kQ4_0;
    case formats::GgmlType::kQ4_K: return kernels::Dtype::kQ4_K;
    case formats::GgmlType::kQ5_K: return kernels::Dtype::kQ5_K;
    case formats::GgmlType::kQ6_K: return kernels::Dtype::kQ6_K;
    default:
      return Status::InvalidArgument("tensor " + std::string(name) + " is " +
                                     std::string(formats::GgmlTypeName(type)) + ": nielsd has no kernel for it");
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

StatusOr<model::ModelConfig> ConfigOf(const formats::GgufFile& f) {
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
  c.context = kContext;
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
    for (auto [out, name, required] : std::vector<std::tuple<model::Tensor*, std::string, bool>>{
             {&b.attn_norm, "attn_norm.weight", true}, {&b.wq, "attn_q.weight", true},
             {&b.wk, "attn_k.weight", true},         {&b.wv, "attn_v.weight", true},
             {&b.bq, "attn_q.bias", c.attention_bias}, {&b.bk, "attn_k.bias", c.attention_bias},
             {&b.bv, "attn_v.bias", c.attention_bias}, {&b.q_norm, "attn_q_norm.weight", c.qk_norm},
             {&b.k_norm, "attn_k_norm.weight", c.qk_norm}, {&b.wo, "attn_output.weight", true},
             {&b.ffn_norm, "ffn_norm.weight", true}, {&b.w_gate, "ffn_gate.weight", true},
             {&b.w_up, "ffn_up.weight", true},       {&b.w_down, "ffn_down.weight", true},
             {&b.b_gate, "ffn_gate.bias", c.mlp_bias}, {&b.b_up, "ffn_up.bias", c.mlp_bias},
             {&b.b_down, "ffn_down.bias", c.mlp_bias}}) {
      NIELS_RETURN_IF_ERROR(set(out, p + name, required));
    }
  }
  w.backing.push_back(std::move(file));
  NIELS_RETURN_IF_ERROR(model::CheckShapes(w, c, "GGUF"));
  return w;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "niels_gguf_logits: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool dequantize = argc == 5 && std::string(argv[4]) == "--dequantize";
  if (argc != 4 && !dequantize) {
    std::fprintf(stderr, "usage: %s GGUF PROMPTS.json OUT.bin [--dequantize]\n", argv[0]);
    return 1;
  }
  auto file = formats::GgufFile::Open(argv[1]);
  if (!file.ok()) return Fail(file.status());
  auto config = ConfigOf(**file);
  if (!config.ok()) return Fail(config.status());
  auto weights = WeightsOf(*file, *config);
  if (!weights.ok()) return Fail(weights.status());
  if (dequantize) {
    weights->ForEachMutable([&](const std::string&, model::Tensor& t) {
      if (!kernels::IsQuantized(t.dtype)) return;
      t = model::OwnedTensor(t.ToFloats(), t.shape, weights->backing);
    });
    if (config->tied_embeddings) weights->lm_head = weights->tok_emb;
  }
  const model::Transformer transformer(*config, std::move(*weights), std::make_shared<kernels::WorkerPool>(1));
  std::ifstream prompts_in(argv[2]);
  const nlohmann::json prompts = nlohmann::json::parse(prompts_in, nullptr, /*allow_exceptions=*/false);
  if (!prompts.is_array()) return Fail(Status::InvalidArgument(std::string(argv[2]) + ": not a JSON array"));
  std::ofstream out(argv[3], std::ios::binary | std::ios::trunc);
  const int64_t V = config->vocab_size;
  for (const nlohmann::json& prompt : prompts) {
    const std::vector<int32_t> tokens = prompt.get<std::vector<int32_t>>();
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) > kContext) {
      return Fail(Status::InvalidArgument("a prompt of 1.." + std::to_string(kContext) + " tokens expected"));
    }
    for (int32_t t : tokens) {
      if (t < 0 || t >= V) return Fail(Status::InvalidArgument("token " + std::to_string(t) + " out of range"));
    }
    std::vector<float> logits = transformer.Forward(tokens);  // [tokens, V]
    for (size_t r = 0; r < tokens.size(); ++r) {
      float* row = logits.data() + r * V;
      float top = row[0];
      for (int64_t j = 1; j < V; ++j) top = std::max(top, row[j]);
      for (int64_t j = 0; j < V; ++j) row[j] -= top;
    }
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  }
  out.close();
  if (!out) return Fail(Status::Internal(std::string(argv[3]) + ": write failed"));
  return 0;
}
