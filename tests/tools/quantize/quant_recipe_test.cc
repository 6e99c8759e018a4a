// The recipe (quant_recipe.h) against llama.cpp's own type selection (llama_quant_compute_types of
// node-llama-cpp's libllama, llama_quant_reference.h): for the tensor lists of real model shapes
// (Llama 3.x 1B..70B, Llama-2-65B-like, Qwen2.5 0.5B..72B, Qwen3 0.6B..32B) and of small or odd ones
// (rows that are not whole 256- or 32-blocks, 1..9 layers, tied and untied heads, odd names), with
// f32, f16 and bf16 sources, for each file type: every tensor's type equals llama.cpp's. Our side
// gets the tensors in convert_hf_to_gguf.py's order, llama.cpp's in its loader's (by layer, then
// name), as llama_model_quantize walks them.

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tools/quantize/llama_quant_reference.h"
#include "tools/quantize/quant_recipe.h"

namespace niels::tools::quantize {
namespace {

using formats::GgmlType;
using reference::LlamaQuantModelDesc;
using reference::LlamaQuantReference;
using reference::ReferenceTensor;

struct ModelSpec {
  std::string label;
  std::string arch;
  int64_t hidden, ffn, layers, heads, kv_heads, head_dim, vocab;
  bool tied;
};

// Real shapes (config.json of each model) and small or odd ones.
const std::vector<ModelSpec>& Specs() {
  static const std::vector<ModelSpec> specs = {
      {"Llama-3.2-1B", "llama", 2048, 8192, 16, 32, 8, 64, 128256, true},
      {"Llama-3.2-3B", "llama", 3072, 8192, 28, 24, 8, 128, 128256, true},
      {"Llama-3.1-8B", "llama", 4096, 14336, 32, 32, 8, 128, 128256, false},
      {"Llama-3.1-70B", "llama", 8192, 28672, 80, 64, 8, 128, 128256, false},
      {"Llama-65B-like (no GQA)", "llama", 8192, 22016, 80, 64, 64, 128, 32000, false},
      {"Qwen2.5-0.5B", "qwen2", 896, 4864, 24, 14, 2, 64, 151936, true},
      {"Qwen2.5-1.5B", "qwen2", 1536, 8960, 28, 12, 2, 128, 151936, true},
      {"Qwen2.5-7B", "qwen2", 3584, 18944, 28, 28, 4, 128, 152064, false},
      {"Qwen2.5-72B", "qwen2", 8192, 29568, 80, 64, 8, 128, 152064, false},
      {"Qwen3-0.6B", "qwen3", 1024, 3072, 28, 16, 8, 128, 151936, true},
      {"Qwen3-8B", "qwen3", 4096, 12288, 36, 32, 8, 128, 151936, false},
      {"Qwen3-32B", "qwen3", 5120, 25600, 64, 64, 8, 128, 151936, false},
      {"test llama 128", "llama", 128, 256, 2, 4, 2, 32, 128256, true},
      {"test qwen2 128", "qwen2", 128, 256, 9, 4, 2, 32, 151936, false},
      {"test qwen3 256/384", "qwen3", 256, 384, 4, 4, 2, 64, 151936, true},
      {"rows of 96 and 100", "llama", 96, 100, 3, 3, 1, 32, 1000, false},
      {"rows of 40", "qwen2", 40, 72, 1, 2, 1, 20, 500, true},
      {"7 layers, ffn 1000", "qwen3", 512, 1000, 7, 8, 4, 64, 3000, false},
  };
  return specs;
}

// A tensor of the spec; dims in GGUF order. 1-D tensors are f32 (as convert writes them), matrices
// `matrix_type`.
struct SpecTensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
};

// The spec's tensors in convert_hf_to_gguf.py's order, plus odd extras: a 2-D tensor with a
// trailing dim of 1 (one effective dim), a name that is not a weight, a kept name, a name of
// 5 bytes, an "other" matrix.
std::vector<SpecTensor> SpecTensors(const ModelSpec& s, GgmlType matrix_type) {
  std::vector<SpecTensor> out;
  auto add = [&out, matrix_type](std::string name, std::vector<int64_t> dims) {
    const GgmlType type = dims.size() == 1 ? GgmlType::kF32 : matrix_type;
    out.push_back({std::move(name), std::move(dims), type});
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("token_embd.weight", {s.hidden, s.vocab});
  if (s.arch == "llama") add("rope_freqs.weight", {s.head_dim / 2});
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {s.hidden});
    add(b + "attn_q.weight", {s.hidden, q});
    add(b + "attn_k.weight", {s.hidden, kv});
    add(b + "attn_v.weight", {s.hidden, kv});
    if (s.arch == "qwen2") {
      add(b + "attn_q.bias", {q});
      add(b + "attn_k.bias", {kv});
      add(b + "attn_v.bias", {kv});
    }
    if (s.arch == "qwen3") {
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
  add("blk.0.extra_proj.weight", {s.hidden, 64});
  add("blk.0.extra_row.weight", {s.hidden, 1});
  add("blk.0.extra_proj.scale", {s.hidden, 64});
  add("position_embd.weight", {s.hidden, 64});
  add("abcde", {64, 64});
  return out;
}

// llama.cpp's loader order: by layer ("blk.N." names; others first), then by name.
std::vector<size_t> LoaderOrder(const std::vector<SpecTensor>& ts) {
  auto layer = [](const std::string& name) {
    int value = -1;
    std::sscanf(name.c_str(), "blk.%d.", &value);
    return value;
  };
  std::vector<size_t> order(ts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer(ts[a].name), lb = layer(ts[b].name);
    return la != lb ? la < lb : ts[a].name < ts[b].name;
  });
  return order;
}

class RecipeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_ = new LlamaQuantReference(); }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }
  static LlamaQuantReference* reference_;
};
LlamaQuantReference* RecipeTest::reference_ = nullptr;

constexpr FileType kFileTypes[] = {FileType::kQ8_0, FileType::kQ4_0, FileType::kQ4_K_M, FileType::kQ5_K_M};

TEST_F(RecipeTest, EveryTensorGetsLlamaCppsType) {
  ASSERT_TRUE(reference_->ok());
  // How often each output type occurred per file type, to show which rules were exercised.
  std::map<std::string, std::map<std::string, int>> seen;
  for (GgmlType matrix_type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    for (const ModelSpec& spec : Specs()) {
      const std::vector<SpecTensor> tensors = SpecTensors(spec, matrix_type);
      ModelDesc model{spec.arch, spec.layers, spec.heads, spec.kv_heads};
      std::vector<SourceTensor> ours;
      for (const SpecTensor& t : tensors) {
        int64_t elements = 1;
        for (int64_t d : t.dims) elements *= d;
        ours.push_back({t.name, t.type, t.dims, elements});
      }
      const std::vector<size_t> order = LoaderOrder(tensors);
      std::vector<ReferenceTensor> theirs;
      for (size_t i : order) theirs.push_back({tensors[i].name, static_cast<uint32_t>(tensors[i].type), tensors[i].dims});
      const LlamaQuantModelDesc desc{spec.arch.c_str(),
                                     static_cast<uint32_t>(spec.hidden),
                                     static_cast<uint32_t>(spec.ffn),
                                     static_cast<uint32_t>(spec.layers),
                                     static_cast<uint32_t>(spec.heads),
                                     static_cast<uint32_t>(spec.kv_heads),
                                     0,
                                     static_cast<uint32_t>(spec.head_dim),
                                     static_cast<uint32_t>(spec.head_dim)};
      for (FileType file_type : kFileTypes) {
        common::StatusOr<std::vector<GgmlType>> planned = PlanTensorTypes(file_type, model, ours);
        ASSERT_TRUE(planned.ok()) << planned.status().ToString();
        std::vector<bool> allows;
        std::vector<uint32_t> expected =
            reference_->Types(desc, static_cast<int32_t>(LlamaFileType(file_type)), theirs, &allows);
        for (size_t k = 0; k < order.size(); ++k) {
          const SpecTensor& t = tensors[order[k]];
          // llama_quant_model_from_metadata marks only llama models of 80 layers with GQA as
          // LLM_TYPE_70B, llama.cpp's loader also qwen2 ones of 80 layers (llama_model_qwen2::
          // load_arch_hparams), whose attn_v q4_K then becomes q5_K in llama_model_quantize
          // (quantize_reference_test checks that on an 80-layer qwen2 file).
          if (spec.arch == "qwen2" && spec.layers == 80 && t.name.find("attn_v.weight") != std::string::npos &&
              expected[k] == static_cast<uint32_t>(GgmlType::kQ4_K)) {
            expected[k] = static_cast<uint32_t>(GgmlType::kQ5_K);
          }
          const std::string where = spec.label + " " + std::string(formats::GgmlTypeName(matrix_type)) + " " +
                                    std::string(FileTypeName(file_type)) + " " + t.name;
          EXPECT_EQ(AllowsQuantization(t.name, t.dims), allows[k]) << where;
          EXPECT_EQ(static_cast<uint32_t>((*planned)[order[k]]), expected[k])
              << where << ": ours " << formats::GgmlTypeName((*planned)[order[k]]) << ", llama.cpp's "
              << (formats::FindGgmlType(expected[k]) ? formats::FindGgmlType(expected[k])->name : "?");
          ++seen[std::string(FileTypeName(file_type))][std::string(formats::GgmlTypeName((*planned)[order[k]]))];
        }
      }
    }
  }
  // The rules that matter were all taken somewhere: q6_K heads and more-bits layers, the 70B
  // attn_v rule (q5_K in q4_k_m), each fallback (q5_0, q5_1, q8_0, f16), kept tensors.
  EXPECT_GT(seen["q4_k_m"]["q6_K"], 0);
  EXPECT_GT(seen["q4_k_m"]["q5_K"], 0);
  EXPECT_GT(seen["q4_k_m"]["q5_0"], 0);
  EXPECT_GT(seen["q4_k_m"]["q8_0"], 0);
  EXPECT_GT(seen["q5_k_m"]["q5_1"], 0);
  EXPECT_GT(seen["q4_0"]["q6_K"], 0);
  EXPECT_GT(seen["q8_0"]["f16"], 0);
  EXPECT_GT(seen["q8_0"]["f32"], 0);
  for (const auto& [type, counts] : seen) {
    std::string line = type + ":";
    for (const auto& [name, n] : counts) line += " " + name + " " + std::to_string(n);
    std::printf("%s\n", line.c_str());
  }
}

TEST_F(RecipeTest, TensorOrderDoesNotChangeTheTypes) {
  // llama.cpp counts attn_v and ffn_down in its own order; the recipe must give every tensor the
  // same type whatever order the file lists them in.
  const ModelSpec& spec = Specs()[2];  // Llama-3.1-8B: 32 layers, blk.10 .. blk.31 sort after blk.1
  std::vector<SourceTensor> ours;
  for (const SpecTensor& t : SpecTensors(spec, GgmlType::kF16)) {
    int64_t elements = 1;
    for (int64_t d : t.dims) elements *= d;
    ours.push_back({t.name, t.type, t.dims, elements});
  }
  const ModelDesc model{spec.arch, spec.layers, spec.heads, spec.kv_heads};
  const auto planned = PlanTensorTypes(FileType::kQ4_K_M, model, ours);
  ASSERT_TRUE(planned.ok());
  std::map<std::string, GgmlType> by_name;
  for (size_t i = 0; i < ours.size(); ++i) by_name[ours[i].name] = (*planned)[i];
  std::mt19937 rng(7);
  std::shuffle(ours.begin(), ours.end(), rng);
  const auto shuffled = PlanTensorTypes(FileType::kQ4_K_M, model, ours);
  ASSERT_TRUE(shuffled.ok());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ((*shuffled)[i], by_name[ours[i].name]) << ours[i].name;
}

TEST(RecipeRefusals, OtherArchitecturesAndTypes) {
  const std::vector<SourceTensor> tensors = {{"token_embd.weight", GgmlType::kF32, {256, 10}, 2560}};
  auto falcon = PlanTensorTypes(FileType::kQ8_0, {"falcon", 1, 1, 1}, tensors);
  EXPECT_EQ(falcon.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(falcon.status().message().find("falcon"), std::string::npos);
  const std::vector<SourceTensor> quantized = {{"token_embd.weight", GgmlType::kQ8_0, {256, 10}, 2560}};
  auto q = PlanTensorTypes(FileType::kQ8_0, {"llama", 1, 1, 1}, quantized);
  EXPECT_EQ(q.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("q8_0"), std::string::npos);
}

TEST(RecipeNames, FileTypes) {
  EXPECT_EQ(ParseFileType("Q4_K_M"), FileType::kQ4_K_M);
  EXPECT_EQ(ParseFileType("q5_k_m"), FileType::kQ5_K_M);
  EXPECT_EQ(ParseFileType("q4_k"), std::nullopt);
  EXPECT_EQ(LlamaFileType(FileType::kQ8_0), 7u);
}

}  // namespace
}  // namespace niels::tools::quantize
