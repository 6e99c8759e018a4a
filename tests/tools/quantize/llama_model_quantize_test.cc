// Quantize() against llama.cpp's own llama_model_quantize (libllama of node-llama-cpp 3.21.1,
// NIELS_LLAMA_LIB) on whole synthetic files, where llama.cpp's real loader decides what its mock
// model of quant_recipe_test cannot: an 80-layer qwen2 is "70B" to it, so q4_k_m gives attn_v q5_K
// where it would stay q4_K. Both files must hold the same tensors with the same types, dims and
// bytes (llama.cpp orders them by layer and name; ours keep the input's order).

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/formats/gguf_file.h"
#include "tests/support/temp_files.h"
#include "tests/tools/quantize/llama_quant_reference.h"
#include "tests/tools/quantize/synthetic_model.h"
#include "tools/quantize/gguf_tensor_source.h"
#include "tools/quantize/quantizer.h"

namespace niels::tools::quantize {
namespace {

using formats::GgmlType;
using formats::GgufFile;
using reference::LlamaQuantizeParams;

// llama_model_quantize with llama-quantize's defaults; its return value (0 = success).
uint32_t LlamaModelQuantize(const std::filesystem::path& in, const std::filesystem::path& out, FileType type) {
  void* llama = dlopen(NIELS_LLAMA_LIB, RTLD_NOW | RTLD_LOCAL);
  if (llama == nullptr) {
    ADD_FAILURE() << dlerror() << " (install it with scripts/install_references.sh)";
    return 1;
  }
  auto log_set = reinterpret_cast<void (*)(void (*)(int, const char*, void*), void*)>(dlsym(llama, "llama_log_set"));
  auto backend_init = reinterpret_cast<void (*)()>(dlsym(llama, "llama_backend_init"));
  auto defaults = reinterpret_cast<LlamaQuantizeParams (*)()>(dlsym(llama, "llama_model_quantize_default_params"));
  auto quantize = reinterpret_cast<uint32_t (*)(const char*, const char*, const LlamaQuantizeParams*)>(
      dlsym(llama, "llama_model_quantize"));
  if (log_set == nullptr || backend_init == nullptr || defaults == nullptr || quantize == nullptr) {
    ADD_FAILURE() << "libllama lacks llama_model_quantize or its helpers";
    return 1;
  }
  log_set([](int, const char*, void*) {}, nullptr);
  backend_init();
  LlamaQuantizeParams params = defaults();
  params.ftype = static_cast<int32_t>(LlamaFileType(type));
  params.nthread = 1;
  return quantize(in.c_str(), out.c_str(), &params);
}

TEST(LlamaModelQuantize, Qwen2With80LayersGetsThe70BTypesByteForByte) {
  ::niels::testing::TempDir dir("niels_quantize_70b_");
  synthetic::Shape shape;
  shape.arch = "qwen2";
  shape.layers = 80;
  shape.ffn = 32;  // small: the rule concerns attn_v (rows of hidden = 256)
  shape.matrix_type = GgmlType::kF16;
  synthetic::Model model = synthetic::MakeModel(shape);
  model.SetKey("qwen2.feed_forward_length", formats::GgufWriteValue::U32(static_cast<uint32_t>(shape.ffn)));
  model.Write(dir / "in.gguf");

  auto source = GgufTensorSource::Open(dir / "in.gguf");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  QuantizeOptions options;
  options.type = FileType::kQ4_K_M;
  auto result = Quantize(**source, dir / "ours.gguf", options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(LlamaModelQuantize(dir / "in.gguf", dir / "theirs.gguf", FileType::kQ4_K_M), 0u);

  auto ours = GgufFile::Open(dir / "ours.gguf");
  auto theirs = GgufFile::Open(dir / "theirs.gguf");
  ASSERT_TRUE(ours.ok() && theirs.ok()) << theirs.status().ToString();
  ASSERT_EQ((*ours)->tensors().size(), (*theirs)->tensors().size());
  int q5_k = 0, q6_k = 0;
  for (const formats::GgufTensorInfo& t : (*ours)->tensors()) {
    const formats::GgufTensorInfo* r = (*theirs)->FindTensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(formats::GgmlTypeName(t.type), formats::GgmlTypeName(r->type)) << t.name;
    EXPECT_EQ(t.Shape(), r->Shape()) << t.name;
    EXPECT_TRUE(t.size_bytes == r->size_bytes &&
                std::memcmp((*ours)->TensorData(t), (*theirs)->TensorData(*r), t.size_bytes) == 0)
        << t.name << ": other bytes";
    if (std::string(t.name).ends_with("attn_v.weight")) {
      q5_k += t.type == GgmlType::kQ5_K;
      q6_k += t.type == GgmlType::kQ6_K;
    }
  }
  // use_more_bits gives 40 of the 80 attn_v q6_K (0-9, 70-79, 12, 15, ..., 69); the 70B rule turns
  // the other 40 from q4_K into q5_K.
  EXPECT_EQ(q6_k, 40);
  EXPECT_EQ(q5_k, 40);
}

}  // namespace
}  // namespace niels::tools::quantize
