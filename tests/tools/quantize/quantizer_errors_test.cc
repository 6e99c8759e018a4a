// Bad inputs and failed writes: each gives a clear error (the status code, and a message naming the
// file, key, tensor or value that is wrong) and leaves the output path as it was -- absent, or an
// earlier file untouched -- with no temporary file beside it. Table-driven over edits of a good
// synthetic model (synthetic_model.h).

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_files.h"
#include "tests/tools/quantize/synthetic_model.h"
#include "tools/quantize/gguf_tensor_source.h"
#include "tools/quantize/output_file.h"
#include "tools/quantize/quantizer.h"

namespace niels::tools::quantize {
namespace {

using common::StatusCode;
using formats::GgmlType;
using formats::GgufWriteValue;

// Files in `dir` other than `keep`.
std::vector<std::string> OtherFiles(const std::filesystem::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
  }
  return out;
}

// Opens and quantizes `in` to dir/out.gguf, where an earlier file is; returns the status.
common::Status QuantizeFile(const ::niels::testing::TempDir& dir, const std::filesystem::path& in, FileType type) {
  auto source = GgufTensorSource::Open(in);
  if (!source.ok()) return source.status();
  QuantizeOptions options;
  options.type = type;
  options.threads = 2;
  auto result = Quantize(**source, dir / "out.gguf", options);
  return result.ok() ? common::Status::Ok() : result.status();
}

struct BadModel {
  std::string label;
  std::function<void(synthetic::Model*)> edit;
  FileType type;
  StatusCode code;
  std::vector<std::string> message_parts;  // each must appear in the message
};

void SetValue(synthetic::Model* m, const std::string& tensor, size_t index, float value) {
  synthetic::Tensor& t = m->Find(tensor);
  std::vector<float> values = t.values;
  values[index] = value;
  synthetic::SetValues(&t, std::move(values));
}

std::vector<BadModel> BadModels() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"unsupported architecture", [](synthetic::Model* m) { m->SetKey("general.architecture", GgufWriteValue::String("gpt2")); },
       FileType::kQ8_0, StatusCode::kInvalidArgument, {"in.gguf", "architecture \"gpt2\""}},
      {"no architecture", [](synthetic::Model* m) { m->EraseKey("general.architecture"); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"general.architecture"}},
      {"no block_count", [](synthetic::Model* m) { m->EraseKey("llama.block_count"); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"llama.block_count", "missing"}},
      {"block_count as a string",
       [](synthetic::Model* m) { m->SetKey("llama.block_count", GgufWriteValue::String("two")); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"llama.block_count"}},
      {"block_count 0", [](synthetic::Model* m) { m->SetKey("llama.block_count", GgufWriteValue::U32(0)); },
       FileType::kQ8_0, StatusCode::kInvalidArgument, {"llama.block_count", "not >= 1"}},
      {"block_count 100000",
       [](synthetic::Model* m) { m->SetKey("llama.block_count", GgufWriteValue::U32(100000)); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"llama.block_count", "more than 512"}},
      {"no head_count", [](synthetic::Model* m) { m->EraseKey("llama.attention.head_count"); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"llama.attention.head_count"}},
      {"mixture of experts", [](synthetic::Model* m) { m->SetKey("llama.expert_count", GgufWriteValue::U32(8)); },
       FileType::kQ4_K_M, StatusCode::kInvalidArgument, {"mixture-of-experts", "8"}},
      {"a shard of a split model", [](synthetic::Model* m) { m->SetKey("split.count", GgufWriteValue::U16(3)); },
       FileType::kQ8_0, StatusCode::kInvalidArgument, {"split", "3"}},
      {"already quantized",
       [](synthetic::Model* m) {
         synthetic::Tensor& t = m->Find("blk.0.attn_q.weight");
         t.type = GgmlType::kQ8_0;
         t.bytes.resize(static_cast<size_t>(t.elements() / 32 * 34));
       },
       FileType::kQ4_0, StatusCode::kInvalidArgument, {"blk.0.attn_q.weight", "q8_0", "already quantized"}},
      {"an i32 tensor",
       [](synthetic::Model* m) {
         synthetic::Tensor& t = m->Find("rope_freqs.weight");
         t.type = GgmlType::kI32;
       },
       FileType::kQ8_0, StatusCode::kInvalidArgument, {"rope_freqs.weight", "i32"}},
      {"NaN in a matrix", [nan](synthetic::Model* m) { SetValue(m, "blk.1.ffn_up.weight", 256 * 3 + 7, nan); },
       FileType::kQ4_K_M, StatusCode::kInvalidArgument, {"blk.1.ffn_up.weight", "row 3, column 7", "not finite"}},
      {"infinity in a norm (copied)",
       [](synthetic::Model* m) { SetValue(m, "output_norm.weight", 5, INFINITY); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"output_norm.weight", "row 0, column 5", "not finite"}},
      {"a value too large to quantize",
       [](synthetic::Model* m) { SetValue(m, "blk.0.attn_k.weight", 300, 3e12f); }, FileType::kQ5_K_M,
       StatusCode::kInvalidArgument, {"blk.0.attn_k.weight", "row 1, column 44", "too large"}},
      {"a q8_0 scale beyond f16",
       [](synthetic::Model* m) { SetValue(m, "blk.0.attn_q.weight", 256 * 2 + 40, 2e7f); }, FileType::kQ8_0,
       StatusCode::kInvalidArgument, {"blk.0.attn_q.weight", "q8_0 block at row 2, columns 32 to 63", "f16"}},
  };
}

class BadModelTest : public ::testing::TestWithParam<BadModel> {};

TEST_P(BadModelTest, ClearErrorAndNoOutput) {
  ::niels::testing::TempDir dir("niels_quantize_");
  synthetic::Model model = synthetic::MakeModel({});
  GetParam().edit(&model);
  model.Write(dir / "in.gguf");
  ::niels::testing::WriteFile(dir / "out.gguf", "an earlier file");
  const common::Status status = QuantizeFile(dir, dir / "in.gguf", GetParam().type);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), GetParam().code) << status.ToString();
  for (const std::string& part : GetParam().message_parts) {
    EXPECT_NE(status.message().find(part), std::string::npos) << "\"" << part << "\" not in: " << status.message();
  }
  EXPECT_EQ(::niels::testing::ReadFile(dir / "out.gguf"), "an earlier file");
  EXPECT_EQ(OtherFiles(dir.path(), {"in.gguf", "out.gguf"}), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Edits, BadModelTest, ::testing::ValuesIn(BadModels()),
                         [](const ::testing::TestParamInfo<BadModel>& info) {
                           std::string name;
                           for (char c : info.param.label) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(BadFiles, NotGgufTruncatedMissingEmpty) {
  ::niels::testing::TempDir dir("niels_quantize_");
  synthetic::MakeModel({}).Write(dir / "good.gguf");
  const std::string good = ::niels::testing::ReadFile(dir / "good.gguf");
  ::niels::testing::WriteFile(dir / "text.gguf", "this is not a model, just some text of sufficient length");
  ::niels::testing::WriteFile(dir / "header.gguf", good.substr(0, 200));
  ::niels::testing::WriteFile(dir / "data.gguf", good.substr(0, good.size() - 1000));
  ::niels::testing::WriteFile(dir / "empty.gguf", "");
  const std::pair<std::string, std::string> cases[] = {
      {"text.gguf", "not a GGUF file"}, {"header.gguf", "in its 200 bytes"},      {"data.gguf", "past the end"},
      {"empty.gguf", "shorter than"},   {"missing.gguf", "cannot open"},
  };
  for (const auto& [name, part] : cases) {
    const common::Status status = QuantizeFile(dir, dir / name, FileType::kQ8_0);
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(part), std::string::npos) << status.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out.gguf"));
  EXPECT_EQ(OtherFiles(dir.path(), {"good.gguf", "text.gguf", "header.gguf", "data.gguf", "empty.gguf"}),
            std::vector<std::string>{});
}

TEST(BadFiles, NoTensors) {
  ::niels::testing::TempDir dir("niels_quantize_");
  synthetic::Model model = synthetic::MakeModel({});
  model.tensors.clear();
  model.Write(dir / "in.gguf");
  const common::Status status = QuantizeFile(dir, dir / "in.gguf", FileType::kQ8_0);
  EXPECT_NE(status.message().find("no tensors"), std::string::npos) << status.ToString();
}

TEST(BadOutput, MissingDirectoryOrADirectory) {
  ::niels::testing::TempDir dir("niels_quantize_");
  synthetic::MakeModel({}).Write(dir / "in.gguf");
  auto source = GgufTensorSource::Open(dir / "in.gguf");
  ASSERT_TRUE(source.ok());
  QuantizeOptions options;
  auto missing = Quantize(**source, dir / "no" / "such" / "out.gguf", options);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status().ToString();
  std::filesystem::create_directory(dir / "sub");
  auto directory = Quantize(**source, dir / "sub", options);
  EXPECT_NE(directory.status().message().find("is a directory"), std::string::npos);
  options.threads = 0;
  EXPECT_EQ(Quantize(**source, dir / "out.gguf", options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OtherFiles(dir.path(), {"in.gguf", "sub"}), std::vector<std::string>{});
}

TEST(OutputFileTest, AppearsOnlyOnCommitAndReplaces) {
  ::niels::testing::TempDir dir("niels_quantize_");
  ::niels::testing::WriteFile(dir / "f", "old");
  {
    auto file = OutputFile::Create(dir / "f");
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append("new", 3).ok());
    ASSERT_TRUE((*file)->AppendZeros(5000).ok());
    EXPECT_EQ((*file)->size(), 5003u);
    EXPECT_EQ(::niels::testing::ReadFile(dir / "f"), "old");  // not yet
  }  // destroyed without Commit: discarded
  EXPECT_EQ(::niels::testing::ReadFile(dir / "f"), "old");
  EXPECT_EQ(OtherFiles(dir.path(), {"f"}), std::vector<std::string>{});
  auto file = OutputFile::Create(dir / "f");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("new", 3).ok());
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_EQ(::niels::testing::ReadFile(dir / "f"), "new");
  EXPECT_EQ(OtherFiles(dir.path(), {"f"}), std::vector<std::string>{});
  const auto mode = std::filesystem::status(dir / "f").permissions();
  EXPECT_TRUE((mode & std::filesystem::perms::owner_read) != std::filesystem::perms::none);
}

}  // namespace
}  // namespace niels::tools::quantize
