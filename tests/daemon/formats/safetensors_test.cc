#include "daemon/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "tests/support/host_tensors.h"
#include "tests/support/test_model.h"

namespace niels::daemon::formats {
namespace {

using common::StatusCode;
using niels::testing::HostTensor;
using niels::testing::WriteHostSafetensors;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The elements of an F32/F16/BF16 tensor of the file, as floats.
std::vector<float> Floats(const SafetensorsFile& file, const SafetensorsTensorInfo& info) {
  const kernels::Dtype dtype = info.dtype == SafetensorsDtype::kF16    ? kernels::Dtype::kF16
                               : info.dtype == SafetensorsDtype::kBF16 ? kernels::Dtype::kBF16
                                                                       : kernels::Dtype::kF32;
  std::vector<std::byte> aligned(info.end - info.begin);
  if (!aligned.empty()) std::memcpy(aligned.data(), file.Data(info), aligned.size());
  std::vector<float> out(aligned.size() / kernels::DtypeSize(dtype));
  for (size_t i = 0; i < out.size(); ++i) out[i] = kernels::ElementToFloat(aligned.data(), dtype, i);
  return out;
}

// Little-endian bytes of floats, written by hand (independent of the writer under test).
std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::filesystem::path Path() const { return dir_ / "model.safetensors"; }

  // Opens Path() and expects INVALID_ARGUMENT with a message naming the file and `needles`.
  void ExpectInvalid(const std::vector<std::string>& needles) {
    auto file = SafetensorsFile::Open(Path());
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(file.status().message(), HasSubstr(Path().string()));
    for (const auto& n : needles) EXPECT_THAT(file.status().message(), HasSubstr(n));
  }

  niels::testing::TempDir dir_{"niels_safetensors_test_"};
};

TEST_F(SafetensorsTest, F32DataIsReadInPlace) {
  std::vector<float> a_values(12);
  for (int i = 0; i < 12; ++i) a_values[i] = 0.5f * static_cast<float>(i);
  const HostTensor a = HostTensor::F32({3, 4}, a_values);
  const HostTensor b = HostTensor::F32({2}, {-1.5f, 2.25f});
  ASSERT_TRUE(WriteHostSafetensors(Path(), {{"a", a}, {"b", b}}).ok());
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  const SafetensorsTensorInfo* info = (*file)->Find("a");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{3, 4}));
  const std::byte* data = (*file)->Data(*info);
  EXPECT_TRUE(data >= (*file)->mapping_data() && data + 48 <= (*file)->mapping_data() + (*file)->mapping_size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 8, 0u) << "the writer aligns the data section";
  EXPECT_EQ(Floats(**file, *info), a_values);
  EXPECT_EQ(Floats(**file, *(*file)->Find("b")), (std::vector<float>{-1.5f, 2.25f}));
  EXPECT_EQ((*file)->Find("c"), nullptr);
}

TEST_F(SafetensorsTest, ReadsHandWrittenFileWithMetadata) {
  // Header built by hand (the data section need not be aligned): still the right values.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1.0f, -2.0f, 3.5f, 0.25f}));
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ((*file)->tensors().size(), 1u);
  EXPECT_EQ(Floats(**file, (*file)->tensors()[0]), (std::vector<float>{1.0f, -2.0f, 3.5f, 0.25f}));
}

TEST_F(SafetensorsTest, F16AndBF16AreReadExactly) {
  // Values exactly representable in f16 and bf16, so the expected f32 values are known.
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, -0.125f, 96.0f};
  const HostTensor expected = HostTensor::F32({2, 3}, values);
  ASSERT_TRUE(WriteHostSafetensors(Path(), {{"h", expected.To(SafetensorsDtype::kF16)},
                                            {"b", expected.To(SafetensorsDtype::kBF16)}}).ok());
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->Find("h")->dtype, SafetensorsDtype::kF16);
  EXPECT_EQ((*file)->Find("b")->dtype, SafetensorsDtype::kBF16);
  for (const char* name : {"h", "b"}) {
    EXPECT_EQ(Floats(**file, *(*file)->Find(name)), values) << name;
  }
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(Path());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr(Path().string()));
}

TEST_F(SafetensorsTest, FileShorterThanLengthField) {
  niels::testing::WriteFile(Path(), "abc");
  ExpectInvalid({"shorter than the 8-byte header length"});
}

// Malformed case: safetensors header longer than the file.
TEST_F(SafetensorsTest, HeaderLongerThanFile) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1.0f}), /*header_length=*/4096);
  ExpectInvalid({"header length 4096", "longer than the file"});
}

// Malformed case: data offsets past the end.
TEST_F(SafetensorsTest, DataOffsetsPastTheEnd) {
  const std::string header =
      R"({"ok":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[4],"data_offsets":[4,20]}})";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1.0f, 2.0f, 3.0f}));
  ExpectInvalid({"tensor w", "past the end"});
}

TEST_F(SafetensorsTest, DataOffsetsNotMatchingShapeAndDtype) {
  const std::string header = R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,24]}})";
  niels::testing::WriteRawSafetensors(Path(), header, std::string(24, '\0'));
  ExpectInvalid({"tensor w", "24 bytes", "[2, 3]", "needs 12"});
}

TEST_F(SafetensorsTest, OverlappingDataOffsets) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1, 2, 3}));
  ExpectInvalid({"a", "b", "overlapping"});
}

TEST_F(SafetensorsTest, UnknownDtype) {
  const std::string header = R"({"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1, 2}));
  ExpectInvalid({"tensor w", "unknown dtype \"Q4_K\""});
}

TEST_F(SafetensorsTest, InvalidHeaderJson) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8])";
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1, 2}));
  ExpectInvalid({"header is not valid JSON"});
}

// A header nested 200,000 levels deep is refused while it is parsed (the limit every JSON file of
// a model shares); 128 levels are only data (an unknown __metadata__ value).
TEST_F(SafetensorsTest, HeaderNestedPastTheLimitIsRefused) {
  const auto deep = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  for (size_t depth : {size_t{128}, size_t{200'000}}) {
    SCOPED_TRACE(depth);
    niels::testing::WriteRawSafetensors(Path(), R"({"w":{"dtype":"F32","shape":)" + deep(depth) + R"(,"data_offsets":[0,8]}})",
                                        FloatBytes({1, 2}));
    ExpectInvalid({": header: nested deeper than 128 levels"});
  }
  niels::testing::WriteRawSafetensors(
      Path(), R"({"__metadata__":{"x":)" + deep(126) + R"(},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      FloatBytes({1, 2}));
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_NE((*file)->Find("w"), nullptr);
}

// Find goes through an index by name built once at Open (one hash lookup each, O(1) expected; it
// was a scan of every tensor, so finding each of n tensors cost n^2 / 2 name comparisons): every
// one of 20,000 tensors is found as itself, in any order, and names that are not there (prefixes,
// extensions, the metadata key) are not.
TEST_F(SafetensorsTest, FindLooksEveryTensorUpByName) {
  constexpr int kTensors = 20'000;
  std::string header = R"({"__metadata__":{"format":"pt"})";
  for (int i = 0; i < kTensors; ++i) {
    header += fmt::format(R"(,"layer.{}.w":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}})", i, 4 * i, 4 * i + 4);
  }
  header += "}";
  std::vector<float> values(kTensors);
  for (int i = 0; i < kTensors; ++i) values[i] = static_cast<float>(i);
  niels::testing::WriteRawSafetensors(Path(), header, FloatBytes(values));
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ((*file)->tensors().size(), size_t{kTensors});
  for (int i = kTensors - 1; i >= 0; --i) {
    const SafetensorsTensorInfo* info = (*file)->Find(fmt::format("layer.{}.w", i));
    ASSERT_NE(info, nullptr) << i;
    EXPECT_EQ(info->name, fmt::format("layer.{}.w", i));
    EXPECT_EQ(info->begin, uint64_t(4 * i));
    EXPECT_EQ(Floats(**file, *info), std::vector<float>{static_cast<float>(i)});
  }
  for (const char* absent : {"layer.1", "layer.1.w.x", "layer.20000.w", "__metadata__", "", "ayer.1.w"}) {
    EXPECT_EQ((*file)->Find(absent), nullptr) << absent;
  }
}

TEST_F(SafetensorsTest, MalformedEntries) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":[1,2]})", "not an object"},
      {R"({"w":{"shape":[2],"data_offsets":[0,8]}})", "dtype"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "shape"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "reversed"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", "too large"},
  };
  for (const auto& [header, needle] : cases) {
    SCOPED_TRACE(header);
    niels::testing::WriteRawSafetensors(Path(), header, FloatBytes({1, 2}));
    ExpectInvalid({"tensor w", needle});
  }
}

// Never crash on a damaged file: every truncation and many byte flips either fail cleanly or open
// a file whose every tensor can be read.
TEST_F(SafetensorsTest, DamagedFilesFailCleanly) {
  std::mt19937 values(11);
  ASSERT_TRUE(WriteHostSafetensors(Path(), {{"a", HostTensor::Randn({3, 5}, values)},
                                            {"b", HostTensor::Randn({7}, values).To(SafetensorsDtype::kF16)},
                                            {"c", HostTensor::Randn({2, 2}, values).To(SafetensorsDtype::kBF16)}}).ok());
  const std::string good = niels::testing::ReadFile(Path());
  auto read_all = [&]() {
    auto file = SafetensorsFile::Open(Path());
    if (!file.ok()) {
      EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
      return false;
    }
    for (const auto& info : (*file)->tensors()) {
      if (info.dtype == SafetensorsDtype::kF32 || info.dtype == SafetensorsDtype::kF16 ||
          info.dtype == SafetensorsDtype::kBF16) {
        float sum = 0.0f;
        for (float v : Floats(**file, info)) sum += v;
        (void)sum;
      }
    }
    return true;
  };
  int opened = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    niels::testing::WriteFile(Path(), good.substr(0, n));
    opened += read_all();
  }
  EXPECT_EQ(opened, 0) << "a truncated file must not open";
  std::mt19937 rng(5);
  for (int i = 0; i < 150; ++i) {
    std::string bad = good;
    const size_t pos = rng() % std::min<size_t>(bad.size(), 200);  // the length field and header
    bad[pos] = static_cast<char>(rng() & 0xff);
    niels::testing::WriteFile(Path(), bad);
    read_all();
  }
}

TEST_F(SafetensorsTest, WriterPadsHeaderToEightBytes) {
  ASSERT_TRUE(WriteHostSafetensors(Path(), {{"x", HostTensor::Filled({3}, 1.0f)}}).ok());
  const std::string bytes = niels::testing::ReadFile(Path());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12);
  EXPECT_EQ(bytes.substr(8 + n), FloatBytes({1, 1, 1}));
}

}  // namespace
}  // namespace niels::daemon::formats
