// GgufWriter -> GgufFile round trips: every metadata type, arrays (of strings, of arrays), tensors
// of plain and block types, alignments; the typed accessors' answers and refusals; the ggml type
// table against block sizes stated independently here (from ggml's block structs).
#include "daemon/formats/gguf_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon/formats/gguf_writer.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::formats {
namespace {

using common::StatusCode;
using W = GgufWriteValue;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(GgmlTypeTest, BlockLayoutsOfEveryType) {
  // {id, elements per block, bytes per block}: written out from ggml-common.h's block structs.
  const std::vector<std::tuple<uint32_t, int64_t, int64_t>> expected = {
      {0, 1, 4},      {1, 1, 2},      {2, 32, 18},   {3, 32, 20},    {6, 32, 22},    {7, 32, 24},
      {8, 32, 34},    {9, 32, 36},    {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
      {14, 256, 210}, {15, 256, 292}, {16, 256, 66}, {17, 256, 74},  {18, 256, 98},  {19, 256, 50},
      {20, 32, 18},   {21, 256, 110}, {22, 256, 82}, {23, 256, 136}, {24, 1, 1},     {25, 1, 2},
      {26, 1, 4},     {27, 1, 8},     {28, 1, 8},    {29, 256, 56},  {30, 1, 2},     {34, 256, 54},
      {35, 256, 66},  {39, 32, 17},   {40, 64, 36},  {41, 128, 18}};
  for (const auto& [id, block, size] : expected) {
    auto t = FindGgmlType(id);
    ASSERT_TRUE(t.has_value()) << id;
    EXPECT_EQ(t->block_size, block) << t->name;
    EXPECT_EQ(t->type_size, size) << t->name;
  }
  for (uint32_t retired : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u}) {
    EXPECT_FALSE(FindGgmlType(retired).has_value()) << retired;
  }
  EXPECT_EQ(GgmlTensorBytes(GgmlType::kQ4_K, 512, 512 * 3), 6 * 144);
  EXPECT_FALSE(GgmlTensorBytes(GgmlType::kQ4_K, 128, 128).has_value());  // half a block per row
  EXPECT_EQ(GgmlTensorBytes(GgmlType::kQ8_0, 0, 0), 0);
}

class GgufRoundTripTest : public ::testing::Test {
 protected:
  std::shared_ptr<const GgufFile> WriteAndOpen(const GgufWriter& writer) {
    const auto path = dir_ / "model.gguf";
    EXPECT_TRUE(writer.Write(path).ok());
    auto file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return file.ok() ? *file : nullptr;
  }
  testing::TempDir dir_;
};

TEST_F(GgufRoundTripTest, EveryMetadataType) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("general.architecture", W::String("llama")).ok());
  ASSERT_TRUE(w.AddMetadata("u8", W::U8(250)).ok());
  ASSERT_TRUE(w.AddMetadata("i8", W::I8(-100)).ok());
  ASSERT_TRUE(w.AddMetadata("u16", W::U16(65000)).ok());
  ASSERT_TRUE(w.AddMetadata("i16", W::I16(-30000)).ok());
  ASSERT_TRUE(w.AddMetadata("u32", W::U32(4000000000u)).ok());
  ASSERT_TRUE(w.AddMetadata("i32", W::I32(-2000000000)).ok());
  ASSERT_TRUE(w.AddMetadata("f32", W::F32(0.1f)).ok());
  ASSERT_TRUE(w.AddMetadata("bool", W::Bool(true)).ok());
  ASSERT_TRUE(w.AddMetadata("u64", W::U64(18000000000000000000ull)).ok());
  ASSERT_TRUE(w.AddMetadata("i64", W::I64(-9000000000000000000ll)).ok());
  ASSERT_TRUE(w.AddMetadata("f64", W::F64(0.1)).ok());
  ASSERT_TRUE(w.AddMetadata("empty", W::String("")).ok());
  ASSERT_TRUE(w.AddMetadata("tokens", W::StringArray({"a", "", "\xc4\xa0the", std::string("n\0ul", 4)})).ok());
  ASSERT_TRUE(w.AddMetadata("types", W::I32Array({1, -2, 3})).ok());
  ASSERT_TRUE(w.AddMetadata("scores", W::F32Array({0.5f, -1.25f})).ok());
  ASSERT_TRUE(w.AddMetadata("u64s", W::Array(GgufValueType::kUint64, {W::U64(1), W::U64(~0ull)})).ok());
  ASSERT_TRUE(w.AddMetadata("nested", W::Array(GgufValueType::kArray,
                                               {W::StringArray({"x", "yz"}), W::I32Array({}),
                                                W::Array(GgufValueType::kArray, {W::F32Array({2.5f})})}))
                  .ok());
  auto f = WriteAndOpen(w);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->metadata().size(), 18u);
  EXPECT_EQ(f->metadata()[1].key, "u8");
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetUint("u8"), 250u);
  EXPECT_EQ(*f->GetInt("i8"), -100);
  EXPECT_EQ(*f->GetUint("u16"), 65000u);
  EXPECT_EQ(*f->GetInt("i16"), -30000);
  EXPECT_EQ(*f->GetUint("u32"), 4000000000u);
  EXPECT_EQ(*f->GetInt("i32"), -2000000000);
  EXPECT_EQ(*f->GetFloat("f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(*f->GetBool("bool"));
  EXPECT_EQ(*f->GetUint("u64"), 18000000000000000000ull);
  EXPECT_EQ(*f->GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f->GetFloat("f64"), 0.1);
  EXPECT_EQ(*f->GetString("empty"), "");
  EXPECT_EQ(*f->GetStringArray("tokens"),
            (std::vector<std::string_view>{"a", "", "\xc4\xa0the", std::string_view("n\0ul", 4)}));
  EXPECT_EQ(*f->GetIntArray("types", 3), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f->GetFloatArray("scores", 2), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(f->GetIntArray("u64s", 100).status().code(), StatusCode::kInvalidArgument);  // ~0 > int64

  const GgufKeyValue* nested = f->FindKey("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->value.element_type, GgufValueType::kArray);
  std::vector<GgufValue> outer = f->ArrayElements(nested->value);
  ASSERT_EQ(outer.size(), 3u);
  EXPECT_EQ(outer[0].element_type, GgufValueType::kString);
  std::vector<GgufValue> strings = f->ArrayElements(outer[0]);
  ASSERT_EQ(strings.size(), 2u);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(strings[1].data), strings[1].count), "yz");
  EXPECT_EQ(outer[1].count, 0u);
  std::vector<GgufValue> deepest = f->ArrayElements(f->ArrayElements(outer[2])[0]);
  ASSERT_EQ(deepest.size(), 1u);
  float x = 0;
  std::memcpy(&x, deepest[0].data, 4);
  EXPECT_EQ(x, 2.5f);
}

TEST_F(GgufRoundTripTest, AccessorsNameMissingKeysAndWrongTypes) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("name", W::String("x")).ok());
  ASSERT_TRUE(w.AddMetadata("negative", W::I32(-1)).ok());
  ASSERT_TRUE(w.AddMetadata("count", W::U32(7)).ok());
  ASSERT_TRUE(w.AddMetadata("ints", W::I32Array({1})).ok());
  auto f = WriteAndOpen(w);
  ASSERT_NE(f, nullptr);
  auto missing = f->GetString("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("\"nope\""), std::string::npos);
  auto wrong = f->GetUint("name");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("key \"name\""), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("is STRING, expected an integer"), std::string::npos);
  EXPECT_EQ(f->GetUint("negative").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*f->GetInt("negative"), -1);
  EXPECT_EQ(f->GetFloat("count").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->GetBool("count").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->GetString("count").status().code(), StatusCode::kInvalidArgument);
  auto not_strings = f->GetStringArray("ints");
  EXPECT_NE(not_strings.status().message().find("ARRAY of INT32, expected an ARRAY of STRING"), std::string::npos)
      << not_strings.status().message();
  EXPECT_EQ(f->GetFloatArray("ints", 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->GetIntArray("name", 100).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GgufRoundTripTest, TensorsOfPlainAndBlockTypesAtEveryAlignment) {
  for (uint32_t alignment : {32u, 1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    if (alignment != 32) {
      ASSERT_TRUE(w.AddMetadata("general.alignment", W::U32(alignment)).ok());
    }
    struct Spec {
      std::string name;
      GgmlType type;
      std::vector<int64_t> dims;
      size_t bytes;
    };
    const std::vector<Spec> specs = {
        {"token_embd.weight", GgmlType::kF32, {6, 5}, 6 * 5 * 4},
        {"blk.0.attn_q.weight", GgmlType::kF16, {3}, 6},
        {"blk.0.attn_k.weight", GgmlType::kBF16, {2, 3, 2}, 24},
        {"blk.0.ffn_up.weight", GgmlType::kQ4_0, {64, 3}, 2 * 3 * 18},
        {"blk.0.ffn_down.weight", GgmlType::kQ8_0, {32, 1, 1, 2}, 2 * 34},
        {"blk.0.ffn_gate.weight", GgmlType::kQ4_K, {512, 2}, 4 * 144},
        {"blk.0.iq", GgmlType::kIQ2_XXS, {256}, 66},
        {"empty", GgmlType::kQ6_K, {0, 4}, 0},
        {"blk.0.mx", GgmlType::kMXFP4, {32, 3}, 3 * 17},
        {"ids", GgmlType::kI64, {3}, 24},
    };
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < specs.size(); ++i)
      data.push_back(RandomBytes(specs[i].bytes, static_cast<uint32_t>(i)));
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_TRUE(w.AddTensor(specs[i].name, specs[i].type, specs[i].dims, data[i].data()).ok()) << specs[i].name;
    }
    auto f = WriteAndOpen(w);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const GgufTensorInfo* t = f->FindTensor(specs[i].name);
      ASSERT_NE(t, nullptr) << specs[i].name;
      EXPECT_EQ(t, &f->tensors()[i]);
      EXPECT_EQ(t->type, specs[i].type);
      EXPECT_EQ(t->n_dims, static_cast<int>(specs[i].dims.size()));
      EXPECT_EQ(std::vector<int64_t>(t->dims, t->dims + t->n_dims), specs[i].dims);
      EXPECT_EQ(t->Shape(), std::vector<int64_t>(specs[i].dims.rbegin(), specs[i].dims.rend()));
      EXPECT_EQ(t->size_bytes, specs[i].bytes);
      EXPECT_EQ(t->offset % alignment, 0u);
      const std::byte* p = f->TensorData(*t);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u);
      EXPECT_GE(p, f->mapping_data());  // a view into the mapping, not a copy
      EXPECT_LE(p + t->size_bytes, f->mapping_data() + f->file_size());
      // (an empty tensor's data() may be null, which memcmp may not be given)
      EXPECT_TRUE(specs[i].bytes == 0 || std::memcmp(p, data[i].data(), specs[i].bytes) == 0) << specs[i].name;
    }
    EXPECT_EQ(f->FindTensor("missing"), nullptr);
  }
}

TEST_F(GgufRoundTripTest, SerializeEqualsTheWrittenFile) {
  GgufWriter w;
  ASSERT_TRUE(w.AddMetadata("a", W::U8(1)).ok());
  const std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {3}, v.data()).ok());
  ASSERT_TRUE(w.AddTensor("u", GgmlType::kF32, {3}, v.data()).ok());
  ASSERT_TRUE(w.Write(dir_ / "x.gguf").ok());
  EXPECT_EQ(testing::ReadFile(dir_ / "x.gguf"), w.Serialize());
}

TEST(GgufWriterTest, RefusesWhatTheReaderWouldRefuse) {
  GgufWriter w;
  const float x[4] = {};
  EXPECT_TRUE(w.AddMetadata("k", W::U8(1)).ok());
  EXPECT_FALSE(w.AddMetadata("k", W::U8(1)).ok());
  EXPECT_FALSE(w.AddMetadata("", W::U8(1)).ok());
  EXPECT_FALSE(w.AddMetadata("general.alignment", W::U32(48)).ok());
  EXPECT_FALSE(w.AddMetadata("general.alignment", W::U32(1u << 21)).ok());
  EXPECT_FALSE(w.AddMetadata("general.alignment", W::U64(64)).ok());
  EXPECT_TRUE(w.AddTensor("t", GgmlType::kF32, {4}, x).ok());
  EXPECT_FALSE(w.AddTensor("t", GgmlType::kF32, {4}, x).ok());
  EXPECT_FALSE(w.AddTensor(std::string(64, 'n'), GgmlType::kF32, {4}, x).ok());
  EXPECT_FALSE(w.AddTensor("q", GgmlType::kQ8_0, {16, 2}, x).ok());  // half a block per row
  EXPECT_FALSE(w.AddTensor("d", GgmlType::kF32, {1, 1, 1, 1, 1}, x).ok());
  EXPECT_FALSE(w.AddTensor("n", GgmlType::kF32, {-1}, x).ok());
  EXPECT_FALSE(w.AddTensor("o", GgmlType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, x).ok());
}

}  // namespace
}  // namespace niels::daemon::formats
