#pragma once
// Small GGUF models for quantizer_test: the tensor names, shapes and hyperparameter keys that
// convert_hf_to_gguf.py writes for llama / qwen2 / qwen3 (matrices in f32, f16 or bf16, 1-D tensors
// in f32), random Gaussian values, a few metadata keys of every kind; tests edit a model (a NaN,
// another type, a key removed) before writing it. Test code, header-only.

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/formats/gguf_writer.h"
#include "daemon/kernels/dtype.h"

namespace niels::tools::quantize::synthetic {

namespace formats = ::niels::daemon::formats;

struct Shape {
  std::string arch = "llama";
  int64_t layers = 2, hidden = 256, ffn = 512, heads = 4, kv_heads = 2, head_dim = 64, vocab = 1000;
  bool tied = true;
  formats::GgmlType matrix_type = formats::GgmlType::kF32;
  uint32_t seed = 1;
};

struct Tensor {
  std::string name;
  formats::GgmlType type;
  std::vector<int64_t> dims;  // GGUF order
  std::vector<float> values;  // what the stored bytes hold (exactly: rounded to the type)
  std::string bytes;          // as stored

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

struct Model {
  std::vector<std::pair<std::string, formats::GgufWriteValue>> keys;
  std::vector<Tensor> tensors;

  Tensor& Find(const std::string& name) {
    for (Tensor& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
  void EraseKey(const std::string& key) {
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      if (it->first == key) {
        keys.erase(it);
        return;
      }
    }
  }
  void SetKey(const std::string& key, const formats::GgufWriteValue& value) {
    for (auto& [k, v] : keys) {
      if (k == key) {
        v = value;
        return;
      }
    }
    keys.emplace_back(key, value);
  }
  void Write(const std::filesystem::path& path) const {
    formats::GgufWriter writer;
    for (const auto& [key, value] : keys) Check(writer.AddMetadata(key, value));
    for (const Tensor& t : tensors) Check(writer.AddTensor(t.name, t.type, t.dims, t.bytes.data()));
    Check(writer.Write(path));
  }

 private:
  static void Check(const common::Status& status) {
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }
};

// `values` stored as `type` (f32, f16 or bf16); values are rounded to the type in place.
inline std::string Encode(formats::GgmlType type, std::vector<float>* values) {
  std::string bytes;
  for (float& v : *values) {
    if (type == formats::GgmlType::kF32) {
      bytes.append(reinterpret_cast<const char*>(&v), 4);
      continue;
    }
    const uint16_t half = type == formats::GgmlType::kF16 ? daemon::kernels::FloatToHalf(v)
                                                           : daemon::kernels::FloatToBFloat16(v);
    v = type == formats::GgmlType::kF16 ? daemon::kernels::HalfToFloat(half) : daemon::kernels::BFloat16ToFloat(half);
    bytes.append(reinterpret_cast<const char*>(&half), 2);
  }
  return bytes;
}

inline void SetValues(Tensor* t, std::vector<float> values) {
  t->bytes = Encode(t->type, &values);
  t->values = std::move(values);
}

inline Model MakeModel(const Shape& s) {
  Model m;
  const std::string& a = s.arch;
  m.keys.emplace_back("general.architecture", formats::GgufWriteValue::String(a));
  m.keys.emplace_back("general.name", formats::GgufWriteValue::String("synthetic " + a));
  m.keys.emplace_back(a + ".block_count", formats::GgufWriteValue::U32(static_cast<uint32_t>(s.layers)));
  m.keys.emplace_back(a + ".context_length", formats::GgufWriteValue::U32(4096));
  m.keys.emplace_back(a + ".embedding_length", formats::GgufWriteValue::U32(static_cast<uint32_t>(s.hidden)));
  m.keys.emplace_back(a + ".attention.head_count", formats::GgufWriteValue::U32(static_cast<uint32_t>(s.heads)));
  m.keys.emplace_back(a + ".attention.head_count_kv",
                      formats::GgufWriteValue::U32(static_cast<uint32_t>(s.kv_heads)));
  m.keys.emplace_back(a + ".attention.layer_norm_rms_epsilon", formats::GgufWriteValue::F32(1e-5f));
  m.keys.emplace_back("general.file_type",
                      formats::GgufWriteValue::U32(s.matrix_type == formats::GgmlType::kF32 ? 0 : 1));
  m.keys.emplace_back("tokenizer.ggml.tokens", formats::GgufWriteValue::StringArray({"<s>", "a", "b", "ab"}));
  m.keys.emplace_back("tokenizer.ggml.scores", formats::GgufWriteValue::F32Array({0.0f, -1.0f, -2.0f, -3.5f}));
  m.keys.emplace_back("tokenizer.ggml.bos_token_id", formats::GgufWriteValue::U32(0));
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    Tensor t{name, dims.size() == 1 ? formats::GgmlType::kF32 : s.matrix_type, dims, {}, {}};
    std::vector<float> values(static_cast<size_t>(t.elements()));
    const float scale = dims.size() == 1 ? 0.1f : 1.0f / std::sqrt(static_cast<float>(dims[0]));
    for (float& v : values) v = (dims.size() == 1 ? 1.0f : 0.0f) + scale * normal(rng);
    SetValues(&t, std::move(values));
    m.tensors.push_back(std::move(t));
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("token_embd.weight", {s.hidden, s.vocab});
  if (a == "llama") add("rope_freqs.weight", {s.head_dim / 2});
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {s.hidden});
    add(b + "attn_q.weight", {s.hidden, q});
    add(b + "attn_k.weight", {s.hidden, kv});
    add(b + "attn_v.weight", {s.hidden, kv});
    if (a == "qwen2") {
      add(b + "attn_q.bias", {q});
      add(b + "attn_k.bias", {kv});
      add(b + "attn_v.bias", {kv});
    }
    if (a == "qwen3") {
      add(b + "attn_q_norm.weight", {s.head_dim});
      add(b + "attn_k_norm.weight", {s.head_dim});
    }
    add(b + "attn_output.weight", {q, s.hidden});
    add(b + "ffn_norm.weight", {s.hidden});
    add(b + "ffn_gate.weight", {s.hidden, s.ffn});
    add(b + "ffn_up.weight", {s.hidden, s.ffn});
    add(b + "ffn_down.weight", {s.ffn, s.hidden});
  }
  add("output_norm.weight", {s.hidden});
  if (!s.tied) add("output.weight", {s.hidden, s.vocab});
  return m;
}

}  // namespace niels::tools::quantize::synthetic
