// nielsd's GGUF reader and writer against independent implementations:
//  - files written by niels-export's Python GGUF writer (tools/export/niels_export.py), read by
//    GgufFile and compared with what the exporter meant to write (tests/tools/
//    gguf_export_expected.py dumps its metadata list and tensor bytes before encoding);
//  - the committed fuzz seeds (written by tests/fuzz/make_seeds.py's own Python writer);
//  - files written by GgufWriter, read by node-llama-cpp's GGUF parser (readGgufFileInfo, through
//    tests/tools/gguf_dump.mjs) and compared key by key, tensor by tensor;
//  - llama.cpp itself (its C++ GGUF loader, through node-llama-cpp): a Qwen3 model written by
//    tests/tools/make_family_model.py, read by GgufFile and written again by GgufWriter, loads and
//    computes the same logits and tokens as the original file.
// Needs node and the pinned npm packages (scripts/install_references.sh); fails, with the command
// to run, when they are missing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/formats/gguf_file.h"
#include "daemon/formats/gguf_writer.h"
#include "tests/support/daemon_process.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::formats {
namespace {

using Json = nlohmann::json;
using W = GgufWriteValue;

std::string NodeModules() {
  const char* dir = std::getenv("NIELS_REFERENCE_DIR");
  const char* home = std::getenv("HOME");
  const std::string root =
      dir != nullptr ? dir : std::string(home != nullptr ? home : "/root") + "/.cache/nielsd-reference";
  return root + "/npm/node_modules";
}

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// One value as tests/tools/gguf_dump.mjs prints node-llama-cpp's: 64-bit integers as "i:<n>",
// floats as doubles, arrays as arrays.
Json NodeForm(const GgufFile& f, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kUint8: return Load<uint8_t>(v.data);
    case GgufValueType::kInt8: return Load<int8_t>(v.data);
    case GgufValueType::kUint16: return Load<uint16_t>(v.data);
    case GgufValueType::kInt16: return Load<int16_t>(v.data);
    case GgufValueType::kUint32: return Load<uint32_t>(v.data);
    case GgufValueType::kInt32: return Load<int32_t>(v.data);
    case GgufValueType::kFloat32: return static_cast<double>(Load<float>(v.data));
    case GgufValueType::kBool: return Load<uint8_t>(v.data) != 0;
    case GgufValueType::kString: return std::string(reinterpret_cast<const char*>(v.data), v.count);
    case GgufValueType::kUint64: return fmt::format("i:{}", Load<uint64_t>(v.data));
    case GgufValueType::kInt64: return fmt::format("i:{}", Load<int64_t>(v.data));
    case GgufValueType::kFloat64: return Load<double>(v.data);
    case GgufValueType::kArray: {
      Json out = Json::array();
      for (const GgufValue& e : f.ArrayElements(v)) out.push_back(NodeForm(f, e));
      return out;
    }
  }
  return nullptr;
}

class GgufReferenceTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(GgufReferenceTest, NodeLlamaCppReadsWhatWeWrite) {
  ASSERT_TRUE(std::filesystem::exists(NodeModules() + "/node-llama-cpp/package.json"))
      << NodeModules() << " lacks node-llama-cpp: run scripts/install_references.sh";
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < 300; ++i) {
    tokens.push_back(i % 7 == 0 ? fmt::format("\xc4\xa0tok{}", i) : fmt::format("t{}\xe6\x97\xa5", i));
    scores.push_back(-0.125f * static_cast<float>(i));
    types.push_back(i % 3 + 1);
  }
  for (uint32_t alignment : {32u, 64u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    ASSERT_TRUE(w.AddMetadata("general.architecture", W::String("llama")).ok());
    if (alignment != 32) {
      ASSERT_TRUE(w.AddMetadata("general.alignment", W::U32(alignment)).ok());
    }
    ASSERT_TRUE(w.AddMetadata("llama.block_count", W::U32(2)).ok());
    ASSERT_TRUE(w.AddMetadata("llama.rope.freq_base", W::F32(500000.0f)).ok());
    ASSERT_TRUE(w.AddMetadata("llama.attention.layer_norm_rms_epsilon", W::F32(1e-5f)).ok());
    ASSERT_TRUE(w.AddMetadata("test.u8", W::U8(200)).ok());
    ASSERT_TRUE(w.AddMetadata("test.i8", W::I8(-7)).ok());
    ASSERT_TRUE(w.AddMetadata("test.u16", W::U16(60000)).ok());
    ASSERT_TRUE(w.AddMetadata("test.i16", W::I16(-20000)).ok());
    ASSERT_TRUE(w.AddMetadata("test.i32", W::I32(-123456789)).ok());
    ASSERT_TRUE(w.AddMetadata("test.bool", W::Bool(false)).ok());
    ASSERT_TRUE(w.AddMetadata("test.u64", W::U64(12345678901234567890ull)).ok());
    ASSERT_TRUE(w.AddMetadata("test.i64", W::I64(-1234567890123ll)).ok());
    ASSERT_TRUE(w.AddMetadata("test.f64", W::F64(3.141592653589793)).ok());
    ASSERT_TRUE(w.AddMetadata("test.nested",
                              W::Array(GgufValueType::kArray, {W::StringArray({"a", "b"}), W::StringArray({})}))
                    .ok());
    ASSERT_TRUE(w.AddMetadata("tokenizer.ggml.tokens", W::StringArray(tokens)).ok());
    ASSERT_TRUE(w.AddMetadata("tokenizer.ggml.scores", W::F32Array(scores)).ok());
    ASSERT_TRUE(w.AddMetadata("tokenizer.ggml.token_type", W::I32Array(types)).ok());
    ASSERT_TRUE(
        w.AddMetadata("tokenizer.chat_template", W::String("{% for m in messages %}{{ m.content }}{% endfor %}"))
            .ok());
    std::vector<uint8_t> bytes(1 << 16);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31);
    ASSERT_TRUE(w.AddTensor("token_embd.weight", GgmlType::kF16, {64, 300}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ4_K, {256, 3}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.attn_norm.weight", GgmlType::kF32, {5}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_up.weight", GgmlType::kQ8_0, {96, 2, 2}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_down.weight", GgmlType::kIQ4_XS, {512, 1}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_gate.weight", GgmlType::kBF16, {7, 3}, bytes.data()).ok());
    ASSERT_TRUE(w.AddTensor("rope_freqs.weight", GgmlType::kF32, {16}, bytes.data()).ok());
    const auto path = dir_ / "ours.gguf";
    ASSERT_TRUE(w.Write(path).ok());
    auto ours = GgufFile::Open(path);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    const GgufFile& f = **ours;

    const auto out = dir_ / "node.json";
    auto run = testing::RunProcess({"node", std::string(NIELS_SOURCE_DIR) + "/tests/tools/gguf_dump.mjs",
                                    NodeModules(), path.string(), out.string()});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const Json node = Json::parse(testing::ReadFile(out));
    EXPECT_EQ(node["version"], 3);
    ASSERT_EQ(node["metadata"].size(), f.metadata().size());
    for (const GgufKeyValue& kv : f.metadata()) {
      const std::string key(kv.key);
      ASSERT_TRUE(node["metadata"].contains(key)) << key;
      EXPECT_EQ(node["metadata"][key], NodeForm(f, kv.value)) << key;
    }
    ASSERT_EQ(node["tensors"].size(), f.tensors().size());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const GgufTensorInfo& t = f.tensors()[i];
      const Json& n = node["tensors"][i];
      EXPECT_EQ(n["name"], std::string(t.name));
      EXPECT_EQ(n["type"], static_cast<uint32_t>(t.type)) << t.name;
      std::vector<std::string> dims;
      for (int d = 0; d < t.n_dims; ++d) dims.push_back(std::to_string(t.dims[d]));
      EXPECT_EQ(n["dims"], Json(dims)) << t.name;
      EXPECT_EQ(n["offset"], std::to_string(t.offset)) << t.name;
      EXPECT_EQ(n["fileOffset"], std::to_string(f.data_offset() + t.offset)) << t.name;
    }
  }
}

// Reads a niels-export GGUF of the shipped demo model and compares it with the exporter's inputs.
TEST_F(GgufReferenceTest, ReadsNielsExportFiles) {
  for (const std::string dtype : {"f32", "f16"}) {
    SCOPED_TRACE(dtype);
    const auto gguf = dir_ / ("demo-" + dtype + ".gguf");
    const auto expected_path = dir_ / "expected.json";
    const auto tensors_path = dir_ / "tensors.bin";
    auto run = testing::RunProcess(
        {"/usr/bin/python3", std::string(NIELS_SOURCE_DIR) + "/tests/tools/gguf_export_expected.py",
         std::string(NIELS_SOURCE_DIR) + "/models/niels-demo", dtype, gguf.string(), expected_path.string(),
         tensors_path.string()},
        "", {}, std::chrono::milliseconds(120000));
    ASSERT_EQ(run.exit_code, 0) << run.err;
    auto opened = GgufFile::Open(gguf);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const GgufFile& f = **opened;
    const Json expected = Json::parse(testing::ReadFile(expected_path));
    const std::string data = testing::ReadFile(tensors_path);

    ASSERT_EQ(f.metadata().size(), expected["metadata"].size());
    for (size_t i = 0; i < f.metadata().size(); ++i) {
      const Json& e = expected["metadata"][i];
      const GgufKeyValue& kv = f.metadata()[i];
      const std::string key = e[0];
      ASSERT_EQ(kv.key, key);
      ASSERT_EQ(static_cast<uint32_t>(kv.value.type), e[1].get<uint32_t>()) << key;
      switch (kv.value.type) {
        case GgufValueType::kString: EXPECT_EQ(*f.GetString(key), e[2].get<std::string>()) << key; break;
        case GgufValueType::kBool: EXPECT_EQ(*f.GetBool(key), e[2].get<bool>()) << key; break;
        case GgufValueType::kFloat32:
          EXPECT_EQ(*f.GetFloat(key), static_cast<double>(e[2].get<float>())) << key;
          break;
        case GgufValueType::kArray: {
          const uint32_t etype = e[2][0];
          ASSERT_EQ(static_cast<uint32_t>(kv.value.element_type), etype) << key;
          if (etype == static_cast<uint32_t>(GgufValueType::kString)) {
            auto got = f.GetStringArray(key);
            ASSERT_TRUE(got.ok());
            ASSERT_EQ(got->size(), e[2][1].size());
            for (size_t j = 0; j < got->size(); ++j)
              EXPECT_EQ((*got)[j], e[2][1][j].get<std::string>()) << key << j;
          } else if (etype == static_cast<uint32_t>(GgufValueType::kFloat32)) {
            auto got = f.GetFloatArray(key, e[2][1].size());
            ASSERT_TRUE(got.ok());
            ASSERT_EQ(got->size(), e[2][1].size());
            for (size_t j = 0; j < got->size(); ++j)
              EXPECT_EQ((*got)[j], static_cast<double>(e[2][1][j].get<float>()));
          } else {
            auto got = f.GetIntArray(key, e[2][1].size());
            ASSERT_TRUE(got.ok());
            EXPECT_EQ(*got, e[2][1].get<std::vector<int64_t>>()) << key;
          }
          break;
        }
        default: EXPECT_EQ(*f.GetInt(key), e[2].get<int64_t>()) << key;
      }
    }
    ASSERT_EQ(f.tensors().size(), expected["tensors"].size());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const Json& e = expected["tensors"][i];
      const GgufTensorInfo& t = f.tensors()[i];
      const std::string name = e[0];
      ASSERT_EQ(t.name, name);
      EXPECT_EQ(static_cast<uint32_t>(t.type), e[1].get<uint32_t>()) << name;
      EXPECT_EQ(t.Shape(), e[2].get<std::vector<int64_t>>()) << name;
      ASSERT_EQ(t.size_bytes, e[4].get<uint64_t>()) << name;
      EXPECT_EQ(std::memcmp(f.TensorData(t), data.data() + e[3].get<uint64_t>(), t.size_bytes), 0) << name;
    }
    EXPECT_EQ(f.FindTensor("blk.3.ffn_down.bias")->Shape(), std::vector<int64_t>({160}));
    EXPECT_EQ(*f.GetUint("llama.embedding_length"), 160u);
  }
}

// Writes `original` again with GgufWriter: every key/value copied, every tensor from the mapping.
void Rewrite(const GgufFile& original, const std::filesystem::path& out) {
  GgufWriter w;
  for (const GgufKeyValue& kv : original.metadata()) {
    ASSERT_TRUE(w.AddMetadata(kv.key, GgufWriteValue::Copy(original, kv.value)).ok()) << kv.key;
  }
  for (const GgufTensorInfo& t : original.tensors()) {
    ASSERT_TRUE(
        w.AddTensor(t.name, t.type, std::vector<int64_t>(t.dims, t.dims + t.n_dims), original.TensorData(t)).ok());
  }
  ASSERT_TRUE(w.Write(out).ok());
}

TEST_F(GgufReferenceTest, LlamaCppRunsWhatWeRewrite) {
  ASSERT_TRUE(std::filesystem::exists(NodeModules() + "/node-llama-cpp/package.json"))
      << NodeModules() << " lacks node-llama-cpp: run scripts/install_references.sh";
  const std::string tools = std::string(NIELS_SOURCE_DIR) + "/tests/tools/";
  const auto original = dir_ / "original.gguf";
  auto made =
      testing::RunProcess({"/usr/bin/python3", tools + "make_family_model.py", "qwen3", (dir_ / "hf").string(),
                           "--hidden", "64", "--layers", "1", "--gguf", original.string()},
                          "", {}, std::chrono::milliseconds(300000));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto file = GgufFile::Open(original);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto rewritten = dir_ / "rewritten.gguf";
  Rewrite(**file, rewritten);
  EXPECT_EQ(testing::ReadFile(rewritten), testing::ReadFile(original));  // same layout as gguf-py's

  // Alignment 64 gives another layout (offsets, padding) of the same model.
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("general.alignment", W::U32(64)).ok());
  for (const GgufKeyValue& kv : (*file)->metadata())
    ASSERT_TRUE(w.AddMetadata(kv.key, GgufWriteValue::Copy(**file, kv.value)).ok());
  for (auto it = (*file)->tensors().rbegin(); it != (*file)->tensors().rend(); ++it) {  // reversed order too
    ASSERT_TRUE(w.AddTensor(it->name, it->type, std::vector<int64_t>(it->dims, it->dims + it->n_dims),
                            (*file)->TensorData(*it))
                    .ok());
  }
  const auto relaid = dir_ / "relaid.gguf";
  ASSERT_TRUE(w.Write(relaid).ok());

  std::vector<Json> results;
  std::vector<std::string> logits;
  for (const auto& gguf : {original, rewritten, relaid}) {
    const Json request = {{"gguf", gguf.string()},
                          {"context_size", 64},
                          {"logits", {{151644, 9707, 1879, 11, 1246, 525, 498, 30, 151645}}},
                          {"logits_file", (dir_ / "logits.f32").string()},
                          {"greedy", {{{"prompt", {151644, 9707}}, {"max_new", 6}}}},
                          {"texts", {"Hello world, how are you?"}}};
    testing::WriteFile(dir_ / "request.json", request.dump());
    auto run = testing::RunProcess({"node", tools + "llamacpp_reference.mjs", NodeModules(),
                                    (dir_ / "request.json").string(), (dir_ / "result.json").string()},
                                   "", {}, std::chrono::milliseconds(300000));
    ASSERT_EQ(run.exit_code, 0) << gguf << ": " << run.err;
    results.push_back(Json::parse(testing::ReadFile(dir_ / "result.json")));
    logits.push_back(testing::ReadFile(dir_ / "logits.f32"));
  }
  EXPECT_EQ(results[0]["texts"], Json::parse("[[9707, 1879, 11, 1246, 525, 498, 30]]"));
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i]["greedy"], results[0]["greedy"]) << i;
    EXPECT_EQ(results[i]["texts"], results[0]["texts"]) << i;
    EXPECT_EQ(results[i]["metadata"], results[0]["metadata"]) << i;
    ASSERT_EQ(logits[i].size(), 9u * 151936u * 4u);
    EXPECT_TRUE(logits[i] == logits[0]) << "llama.cpp's logits differ for " << i;
  }
}

// The fuzz seeds come from make_seeds.py's own GGUF writer: all valid but the truncated one.
TEST_F(GgufReferenceTest, ReadsTheFuzzSeeds) {
  const std::string corpus = std::string(NIELS_SOURCE_DIR) + "/tests/fuzz/gguf/corpus/";
  auto llama = GgufFile::Open(corpus + "llama_like");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ(*(*llama)->GetStringArray("tokenizer.ggml.tokens"), (std::vector<std::string_view>{"<s>", "a",
                                                                                               "\xc4\xa0"
                                                                                               "b"}));
  EXPECT_EQ(*(*llama)->GetFloat("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(*(*llama)->GetInt("i64"), -5);
  EXPECT_EQ((*llama)->FindTensor("token_embd.weight")->Shape(), std::vector<int64_t>({2, 4}));
  float x[8];
  std::memcpy(x, (*llama)->TensorData(*(*llama)->FindTensor("token_embd.weight")), sizeof(x));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x[i], static_cast<float>(i));
  auto blocks = GgufFile::Open(corpus + "block_types");
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  EXPECT_EQ((*blocks)->alignment(), 64u);
  EXPECT_EQ((*blocks)->FindTensor("q4k")->size_bytes, 144u);
  EXPECT_TRUE(GgufFile::Open(corpus + "version2").ok());
  EXPECT_TRUE(GgufFile::Open(corpus + "no_tensors").ok());
  EXPECT_FALSE(GgufFile::Open(corpus + "truncated").ok());
}

}  // namespace
}  // namespace niels::daemon::formats
