// Quantize() on small synthetic GGUF models (synthetic_model.h) of each architecture and source
// dtype, for each file type: the output opens with nielsd's GGUF reader; its metadata is the
// input's, key for key and byte for byte, but general.file_type and general.quantization_version;
// its tensors are the input's names, dims and order with the recipe's types (quant_recipe_test holds
// those to llama.cpp); every tensor's bytes are ggml's own encoding of the input (quantize_row_*_ref
// and ggml_fp32_to_fp16_row of libggml-base, NIELS_GGML_BASE_LIB) or, where the type stays, the
// input's bytes. Threads and slab sizes change no byte.

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/formats/gguf_file.h"
#include "tests/support/temp_files.h"
#include "tests/tools/quantize/synthetic_model.h"
#include "tools/quantize/gguf_tensor_source.h"
#include "tools/quantize/quantizer.h"

#ifndef NIELS_GGML_BASE_LIB
#error "NIELS_GGML_BASE_LIB: the path of ggml's libggml-base.so (tests/CMakeLists.txt)"
#endif

namespace niels::tools::quantize {
namespace {

using formats::GgmlType;
using formats::GgufFile;

// ggml's encoding of float values as `type`: quantize_row_<type>_ref, or ggml_fp32_to_fp16_row.
class GgmlEncoder {
 public:
  GgmlEncoder() : library_(dlopen(NIELS_GGML_BASE_LIB, RTLD_NOW | RTLD_LOCAL)) {}
  bool ok() const { return library_ != nullptr; }

  std::string Encode(GgmlType type, const std::vector<float>& values) {
    const formats::GgmlTypeTraits& t = formats::GgmlTypeInfo(type);
    std::string out(static_cast<size_t>(static_cast<int64_t>(values.size()) / t.block_size * t.type_size), '\0');
    const std::string symbol = type == GgmlType::kF16 ? "ggml_fp32_to_fp16_row"
                                                      : "quantize_row_" + std::string(t.name) + "_ref";
    auto fn = reinterpret_cast<void (*)(const float*, void*, int64_t)>(dlsym(library_, symbol.c_str()));
    if (fn == nullptr) {
      ADD_FAILURE() << "no " << symbol << " in " << NIELS_GGML_BASE_LIB;
      return {};
    }
    fn(values.data(), out.data(), static_cast<int64_t>(values.size()));
    return out;
  }

 private:
  void* library_;
};

std::string Bytes(const GgufFile& file, const formats::GgufTensorInfo& info) {
  return std::string(reinterpret_cast<const char*>(file.TensorData(info)), info.size_bytes);
}

std::string Encoded(const GgufFile& file, const formats::GgufValue& value) {
  return formats::GgufWriteValue::Copy(file, value).encoded();
}

struct Case {
  std::string label;
  synthetic::Shape shape;
};

std::vector<Case> Cases() {
  synthetic::Shape llama;  // rows of 256 and 512: no fallback; tied
  synthetic::Shape qwen2;
  qwen2.arch = "qwen2";
  qwen2.hidden = 128;  // fallbacks everywhere; untied
  qwen2.ffn = 96;
  qwen2.head_dim = 32;
  qwen2.layers = 9;
  qwen2.tied = false;
  qwen2.matrix_type = GgmlType::kF16;
  synthetic::Shape qwen3;
  qwen3.arch = "qwen3";
  qwen3.ffn = 384;  // ffn_down rows of 384: q6_K -> q8_0, q4_K -> q5_0
  qwen3.layers = 3;
  qwen3.matrix_type = GgmlType::kBF16;
  synthetic::Shape odd = qwen2;
  odd.hidden = 40;  // rows not whole 32-blocks: f16
  odd.head_dim = 20;
  odd.ffn = 64;
  odd.layers = 1;
  odd.matrix_type = GgmlType::kF32;
  synthetic::Shape odd_f16 = odd;  // f16 rows of 40 stay f16: copied
  odd_f16.matrix_type = GgmlType::kF16;
  return {{"llama_f32", llama},
          {"qwen2_f16", qwen2},
          {"qwen3_bf16", qwen3},
          {"rows40_f32", odd},
          {"rows40_f16", odd_f16}};
}

class QuantizerTest : public ::testing::TestWithParam<std::tuple<Case, FileType>> {
 protected:
  const Case& test_case() const { return std::get<0>(GetParam()); }
  FileType file_type() const { return std::get<1>(GetParam()); }
};

TEST_P(QuantizerTest, OutputIsGgmlsEncodingOfTheInput) {
  ::niels::testing::TempDir dir("niels_quantize_");
  const synthetic::Model model = synthetic::MakeModel(test_case().shape);
  model.Write(dir / "in.gguf");
  auto source = GgufTensorSource::Open(dir / "in.gguf");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  QuantizeOptions options;
  options.type = file_type();
  auto result = Quantize(**source, dir / "out.gguf", options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  auto in = GgufFile::Open(dir / "in.gguf");
  auto out = GgufFile::Open(dir / "out.gguf");
  ASSERT_TRUE(in.ok() && out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)->file_size(), result->file_size);

  // Metadata: the input's keys in order, byte for byte, but the two a quantized file states.
  const auto& in_kv = (*in)->metadata();
  const auto& out_kv = (*out)->metadata();
  ASSERT_EQ(out_kv.size(), in_kv.size() + 1);  // general.quantization_version appended
  for (size_t i = 0; i < in_kv.size(); ++i) {
    ASSERT_EQ(out_kv[i].key, in_kv[i].key);
    if (in_kv[i].key == "general.file_type") continue;
    EXPECT_EQ(Encoded(**out, out_kv[i].value), Encoded(**in, in_kv[i].value)) << in_kv[i].key;
  }
  EXPECT_EQ(*(*out)->GetUint("general.file_type"), LlamaFileType(file_type()));
  EXPECT_EQ((*out)->FindKey("general.file_type")->value.type, formats::GgufValueType::kUint32);
  EXPECT_EQ(out_kv.back().key, "general.quantization_version");
  EXPECT_EQ(out_kv.back().value.type, formats::GgufValueType::kUint32);
  EXPECT_EQ(*(*out)->GetUint("general.quantization_version"), 2u);

  // Tensors: the input's, each as the recipe says, holding ggml's encoding of the input.
  GgmlEncoder ggml;
  ASSERT_TRUE(ggml.ok()) << dlerror();
  ASSERT_EQ((*out)->tensors().size(), model.tensors.size());
  std::map<std::string, int> types_seen;
  for (size_t i = 0; i < model.tensors.size(); ++i) {
    const synthetic::Tensor& t = model.tensors[i];
    const formats::GgufTensorInfo& info = (*out)->tensors()[i];
    ASSERT_EQ(info.name, t.name);
    ASSERT_EQ(std::vector<int64_t>(info.dims, info.dims + info.n_dims), t.dims);
    EXPECT_EQ(info.type, result->types[i]) << t.name;
    ++types_seen[std::string(formats::GgmlTypeName(info.type))];
    const std::string expected = info.type == t.type ? t.bytes : ggml.Encode(info.type, t.values);
    EXPECT_TRUE(Bytes(**out, info) == expected) << t.name << " as " << formats::GgmlTypeName(info.type);
  }
  std::string seen;
  for (const auto& [name, n] : types_seen) seen += " " + name + " x" + std::to_string(n);
  std::printf("%s %s:%s\n", test_case().label.c_str(), std::string(FileTypeName(file_type())).c_str(), seen.c_str());
}

TEST_P(QuantizerTest, ThreadsAndSlabsChangeNoByte) {
  ::niels::testing::TempDir dir("niels_quantize_");
  synthetic::MakeModel(test_case().shape).Write(dir / "in.gguf");
  auto source = GgufTensorSource::Open(dir / "in.gguf");
  ASSERT_TRUE(source.ok());
  std::string first;
  for (auto [threads, slab] : {std::pair{1, int64_t{4} << 20}, {3, 256}, {2, 1000}, {4, 8192}}) {
    QuantizeOptions options;
    options.type = file_type();
    options.threads = threads;
    options.slab_elements = slab;
    ASSERT_TRUE(Quantize(**source, dir / "out.gguf", options).ok());
    const std::string bytes = ::niels::testing::ReadFile(dir / "out.gguf");
    if (first.empty()) first = bytes;
    EXPECT_TRUE(bytes == first) << threads << " threads, slabs of " << slab;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, QuantizerTest,
    ::testing::Combine(::testing::ValuesIn(Cases()), ::testing::Values(FileType::kQ8_0, FileType::kQ4_0,
                                                                        FileType::kQ4_K_M, FileType::kQ5_K_M)),
    [](const ::testing::TestParamInfo<std::tuple<Case, FileType>>& info) {
      return std::get<0>(info.param).label + "_" + std::string(FileTypeName(std::get<1>(info.param)));
    });

TEST(QuantizerReport, OneCallPerTensorWithItsSizes) {
  ::niels::testing::TempDir dir("niels_quantize_");
  const synthetic::Model model = synthetic::MakeModel({});
  model.Write(dir / "in.gguf");
  auto source = GgufTensorSource::Open(dir / "in.gguf");
  ASSERT_TRUE(source.ok());
  std::vector<TensorReport> reports;
  QuantizeOptions options;
  options.type = FileType::kQ4_K_M;
  options.on_tensor = [&reports](const TensorReport& r) { reports.push_back(r); };
  auto result = Quantize(**source, dir / "out.gguf", options);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(reports.size(), model.tensors.size());
  uint64_t in = 0, out = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].index, i);
    EXPECT_EQ(reports[i].count, model.tensors.size());
    EXPECT_EQ(reports[i].name, model.tensors[i].name);
    EXPECT_EQ(reports[i].bytes_in, model.tensors[i].bytes.size());
    EXPECT_EQ(reports[i].bytes_out, *formats::GgmlTensorBytes(reports[i].to, model.tensors[i].dims[0],
                                                             model.tensors[i].elements()));
    in += reports[i].bytes_in;
    out += reports[i].bytes_out;
  }
  EXPECT_EQ(result->bytes_in, in);
  EXPECT_EQ(result->bytes_out, out);
}

}  // namespace
}  // namespace niels::tools::quantize
