#include "tools/torch/torch_weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "daemon/formats/safetensors.h"
#include "tools/torch/transformer_stages.h"

namespace niels::torch_model {

using namespace daemon::model;  // the torch-free model this file converts to and from
namespace {

torch::Tensor ToTensor(const Tensor& t) {
  std::vector<float> values = t.ToFloats();
  return torch::from_blob(values.data(), t.shape, torch::TensorOptions().dtype(torch::kFloat32)).clone();
}

Tensor FromTensor(const torch::Tensor& t, std::vector<std::shared_ptr<const void>>& backing) {
  const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const float* data = c.data_ptr<float>();
  return OwnedTensor(std::vector<float>(data, data + c.numel()), c.sizes().vec(), backing);
}

// Hidden states after the last block (before ln_f): tokens [B, n] -> [B, n, C].
torch::Tensor Trunk(const ModelConfig& config, const TorchWeights& weights, const torch::Tensor& rope,
                    const torch::Tensor& tokens) {
  torch::Tensor h = Embed(weights, tokens);  // [B, n, C]
  for (const TorchBlockWeights& block : weights.blocks) {
    h = Block(config, block, h, [&](const torch::Tensor& x) { return Attention(config, block, x, rope); });
  }
  return h;
}

// Draws tensors in a fixed order from one seeded CPU generator.
class Drawer {
 public:
  Drawer(uint64_t seed, double std) : generator_(at::make_generator<at::CPUGeneratorImpl>(seed)), std_(std) {}

  torch::Tensor Matrix(int64_t rows, int64_t cols) { return Normal({rows, cols}, 0.0, std_); }
  torch::Tensor Bias(int64_t n) { return Normal({n}, 0.0, std_); }
  torch::Tensor Norm(int64_t n) { return Normal({n}, 1.0, 0.1); }

 private:
  torch::Tensor Normal(at::IntArrayRef shape, double mean, double std) {
    return at::normal(mean, std, shape, generator_, at::TensorOptions().dtype(at::kFloat));
  }

  at::Generator generator_;
  double std_;
};

}  // namespace

TorchWeights RandomTorchWeights(const ModelConfig& config, uint64_t seed, double std) {
  const int64_t c = config.width, d_ff = config.d_ff;
  Drawer draw(seed, std);
  TorchWeights w;
  w.tok_emb = draw.Matrix(config.vocab_size, c);  // [V, C]
  for (int64_t i = 0; i < config.layers; ++i) {
    TorchBlockWeights b;
    b.ln1 = draw.Norm(c);
    b.qkv = draw.Matrix(3 * c, c);
    b.proj = draw.Matrix(c, c);
    b.ln2 = draw.Norm(c);
    b.fc_a_w = draw.Matrix(d_ff, c);
    b.fc_a_b = draw.Bias(d_ff);
    b.fc_g_w = draw.Matrix(d_ff, c);
    b.fc_g_b = draw.Bias(d_ff);
    b.fc_out_w = draw.Matrix(c, d_ff);
    b.fc_out_b = draw.Bias(c);
    w.blocks.push_back(std::move(b));
  }
  w.ln_f = draw.Norm(c);  // [C]
  return w;
}

std::vector<torch::Tensor*> TorchWeights::All() {
  std::vector<torch::Tensor*> all = {&tok_emb};
  for (TorchBlockWeights& b : blocks) {
    for (torch::Tensor* t : {&b.ln1, &b.qkv, &b.proj, &b.ln2, &b.fc_a_w, &b.fc_a_b, &b.fc_g_w, &b.fc_g_b, &b.fc_out_w,
                             &b.fc_out_b}) {
      all.push_back(t);
    }
  }
  all.push_back(&ln_f);
  return all;
}

TorchWeights ToTorch(const Weights& w) {
  TorchWeights t;
  t.tok_emb = ToTensor(w.tok_emb);
  for (const BlockWeights& b : w.blocks) {
    t.blocks.push_back({ToTensor(b.attn_norm), ToTensor(b.wqkv), ToTensor(b.wo), ToTensor(b.ffn_norm),
                        ToTensor(b.w_up), ToTensor(b.b_up), ToTensor(b.w_gate), ToTensor(b.b_gate),
                        ToTensor(b.w_down), ToTensor(b.b_down)});
  }
  t.ln_f = ToTensor(w.final_norm);
  return t;
}

Weights FromTorch(const TorchWeights& t) {
  Weights w;
  w.tok_emb = FromTensor(t.tok_emb, w.backing);
  for (const TorchBlockWeights& b : t.blocks) {
    BlockWeights block;
    block.attn_norm = FromTensor(b.ln1, w.backing);
    block.wqkv = FromTensor(b.qkv, w.backing);
    block.wo = FromTensor(b.proj, w.backing);
    block.ffn_norm = FromTensor(b.ln2, w.backing);
    block.w_up = FromTensor(b.fc_a_w, w.backing);
    block.b_up = FromTensor(b.fc_a_b, w.backing);
    block.w_gate = FromTensor(b.fc_g_w, w.backing);
    block.b_gate = FromTensor(b.fc_g_b, w.backing);
    block.w_down = FromTensor(b.fc_out_w, w.backing);
    block.b_down = FromTensor(b.fc_out_b, w.backing);
    w.blocks.push_back(std::move(block));
  }
  w.final_norm = FromTensor(t.ln_f, w.backing);
  w.lm_head = w.tok_emb;  // niels_gpt ties them
  return w;
}

torch::Tensor ForwardTrain(const ModelConfig& config, const TorchWeights& weights, const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= config.context,
              "ForwardTrain: tokens must be [B, n] with 1 <= n <= T");
  torch::Tensor rope = RopeRotations(config).narrow(0, 0, tokens.size(1));  // [n, D/2]
  return Logits(config, weights, Trunk(config, weights, rope, tokens));            // [B, n, V]
}

common::Status WriteTorchSafetensors(const std::filesystem::path& path,
                                     const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  using daemon::formats::SafetensorsDtype;
  std::vector<daemon::formats::SafetensorsEntry> entries;
  std::vector<torch::Tensor> contiguous;  // keeps the data alive until written
  for (const auto& [name, tensor] : tensors) {
    SafetensorsDtype dtype;
    switch (tensor.scalar_type()) {
      case torch::kFloat32: dtype = SafetensorsDtype::kF32; break;
      case torch::kFloat16: dtype = SafetensorsDtype::kF16; break;
      case torch::kBFloat16: dtype = SafetensorsDtype::kBF16; break;
      case torch::kFloat64: dtype = SafetensorsDtype::kF64; break;
      case torch::kInt64: dtype = SafetensorsDtype::kI64; break;
      case torch::kInt32: dtype = SafetensorsDtype::kI32; break;
      case torch::kInt16: dtype = SafetensorsDtype::kI16; break;
      case torch::kInt8: dtype = SafetensorsDtype::kI8; break;
      case torch::kUInt8: dtype = SafetensorsDtype::kU8; break;
      case torch::kBool: dtype = SafetensorsDtype::kBool; break;
      default: return common::Status::Internal(path.string() + ": tensor " + name + " has an unsupported dtype");
    }
    contiguous.push_back(tensor.detach().cpu().contiguous());
    entries.push_back({name, dtype, tensor.sizes().vec(), contiguous.back().data_ptr()});
  }
  return daemon::formats::WriteSafetensors(path, entries);
}

torch::Tensor AsTensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<float*>(values.data()), shape, torch::TensorOptions().dtype(torch::kFloat32))
      .clone();
}

}  // namespace niels::torch_model
