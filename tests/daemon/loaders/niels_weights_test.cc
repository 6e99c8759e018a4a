#include "daemon/loaders/niels_dir.h"

#include "daemon/model/weights.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/formats/safetensors.h"
#include "tests/support/host_tensors.h"
#include "tests/daemon/loaders/niels_named.h"
#include "tests/support/test_model.h"

namespace niels::daemon::loaders {
namespace {

using formats::SafetensorsDtype;
using formats::SafetensorsEntry;
using formats::SafetensorsFile;
using formats::WriteSafetensors;
using kernels::Dtype;
using model::ModelConfig;
using model::ModelConfigToJson;
using model::OwnedTensor;
using model::RandomWeights;
using model::Weights;
using model::BytesWithin;
using model::ConvertWeights;
using testing::HostTensor;
using testing::HostTensorList;
using testing::WriteHostSafetensors;

using common::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;
using kernels::Dtype;
using TensorList = HostTensorList;

// A small config independent of the tokenizer (LoadWeights does not look at it).
ModelConfig SmallConfig() {
  return ModelConfig{.vocab_size = 50, .context = 16, .width = 16, .layers = 2, .heads = 2, .d_ff = 24,
                     .rope_theta = 10000.0, .name = "small"};
}

// Written independently of weights.cc: every state_dict name with its shape.
std::map<std::string, std::vector<int64_t>> ExpectedShapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> m = {{"tok_emb.weight", {c.vocab_size, c.width}},
                                                   {"ln_f.weight", {c.width}}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i);
    m[p + ".ln1.weight"] = {c.width};
    m[p + ".ln2.weight"] = {c.width};
    m[p + ".attn.qkv.weight"] = {3 * c.width, c.width};
    m[p + ".attn.proj.weight"] = {c.width, c.width};
    m[p + ".mlp.fc_a.weight"] = {c.d_ff, c.width};
    m[p + ".mlp.fc_a.bias"] = {c.d_ff};
    m[p + ".mlp.fc_g.weight"] = {c.d_ff, c.width};
    m[p + ".mlp.fc_g.bias"] = {c.d_ff};
    m[p + ".mlp.fc_out.weight"] = {c.width, c.d_ff};
    m[p + ".mlp.fc_out.bias"] = {c.width};
  }
  return m;
}

class WeightsTest : public ::testing::Test {
 protected:
  std::filesystem::path Path() const { return dir_ / "model.safetensors"; }

  // A valid state_dict for config_ (random values), as a name -> tensor list.
  TensorList ValidTensors() const {
    TensorList list;
    std::mt19937 rng(3);
    for (const auto& [name, shape] : ExpectedShapes(config_)) list.emplace_back(name, HostTensor::Randn(shape, rng));
    return list;
  }

  static HostTensor& Get(TensorList& list, const std::string& name) {
    for (auto& [n, t] : list) {
      if (n == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }

  // Writes `tensors`, loads, expects INVALID_ARGUMENT naming the file and `needles`.
  void ExpectInvalid(const TensorList& tensors, const std::vector<std::string>& needles) {
    ASSERT_TRUE(WriteHostSafetensors(Path(), tensors).ok());
    auto w = LoadNielsWeights(Path(), config_);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(w.status().message(), HasSubstr(Path().string()));
    for (const auto& n : needles) EXPECT_THAT(w.status().message(), HasSubstr(n));
  }

  ModelConfig config_ = SmallConfig();
  niels::testing::TempDir dir_{"niels_weights_test_"};
};

TEST_F(WeightsTest, NamedListsEveryTensorOnceAndBytesSumsThem) {
  Weights w = RandomWeights(config_, 1);
  auto named = NielsNamed(w);
  auto expected = ExpectedShapes(config_);
  ASSERT_EQ(named.size(), expected.size());
  int64_t elements = 0;
  for (const auto& [name, t] : named) {
    ASSERT_TRUE(expected.count(name)) << name;
    EXPECT_EQ(t.shape, expected[name]) << name;
    elements += t.numel();
  }
  const int64_t C = config_.width, F = config_.d_ff;
  EXPECT_EQ(elements, config_.vocab_size * C + C + config_.layers * (2 * C + 4 * C * C + 3 * F * C + 2 * F + C));
  EXPECT_EQ(w.bytes(), elements * 4);
}

TEST_F(WeightsTest, SaveLoadRoundTripIsExactAndZeroCopy) {
  Weights original = RandomWeights(config_, 7);
  ASSERT_TRUE(SaveNielsWeights(original, Path()).ok());
  auto loaded = LoadNielsWeights(Path(), config_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->backing.size(), 1u) << "nothing but the mapping backs an f32 file's weights";
  auto file = std::static_pointer_cast<const SafetensorsFile>(loaded->backing.front());
  auto a = NielsNamed(original);
  auto b = NielsNamed(*loaded);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(b[i].second.dtype, Dtype::kF32);
    EXPECT_EQ(a[i].second.ToFloats(), b[i].second.ToFloats()) << a[i].first;
  }
  EXPECT_EQ(BytesWithin(*loaded, file->mapping_data(), file->mapping_size()), loaded->bytes()) << "a tensor was copied";
  EXPECT_EQ(loaded->bytes(), original.bytes());
}

// f16 and bf16 files keep their matrices 16-bit, used straight from the mapping (half the bytes a
// decode step reads); norms and biases are widened to f32 (exactly).
TEST_F(WeightsTest, SixteenBitMatricesStaySixteenBitAndZeroCopy) {
  for (auto [dtype, stored_dtype] :
       {std::pair{Dtype::kF16, SafetensorsDtype::kF16}, {Dtype::kBF16, SafetensorsDtype::kBF16}}) {
    SCOPED_TRACE(std::string(kernels::DtypeName(dtype)));
    TensorList stored = ValidTensors();
    for (auto& [name, t] : stored) t = t.To(stored_dtype);
    ASSERT_TRUE(WriteHostSafetensors(Path(), stored).ok());
    auto loaded = LoadNielsWeights(Path(), config_);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->dtype(), dtype);
    std::map<std::string, HostTensor> by_name(stored.begin(), stored.end());
    int64_t matrix_bytes = 0;
    for (const auto& [name, t] : NielsNamed(*loaded)) {
      EXPECT_EQ(t.dtype, (t.shape.size() == 2) ? dtype : Dtype::kF32) << name;
      EXPECT_EQ(t.ToFloats(), by_name[name].Floats()) << name;
      if (t.shape.size() == 2) matrix_bytes += t.bytes();
    }
    auto file = std::static_pointer_cast<const SafetensorsFile>(loaded->backing.front());
    EXPECT_EQ(BytesWithin(*loaded, file->mapping_data(), file->mapping_size()), matrix_bytes);
    const int64_t C = config_.width, F = config_.d_ff;
    EXPECT_EQ(matrix_bytes, 2 * (config_.vocab_size * C + config_.layers * (4 * C * C + 3 * F * C)));
  }
}

// nielsd --dtype: a file of another dtype is converted at load (rounded to nearest even).
TEST_F(WeightsTest, RequestedDtypeConvertsAtLoad) {
  const Weights original = RandomWeights(config_, 5);
  ASSERT_TRUE(SaveNielsWeights(original, Path()).ok());  // f32
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    SCOPED_TRACE(std::string(kernels::DtypeName(dtype)));
    auto loaded = LoadNielsWeights(Path(), config_, dtype);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto expected = ConvertWeights(original, dtype);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(loaded->dtype(), dtype);
    EXPECT_EQ(loaded->bytes(), expected->bytes());
    const auto got = NielsNamed(*loaded), want = NielsNamed(*expected), before = NielsNamed(original);
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& [name, t] = got[i];
      EXPECT_EQ(t.ToFloats(), want[i].second.ToFloats()) << name;
      if (t.shape.size() == 2) {
        EXPECT_NE(t.ToFloats(), before[i].second.ToFloats()) << name;
      }
    }
    // And back: the 16-bit file read as f32 holds the same values, widened.
    ASSERT_TRUE(SaveNielsWeights(*expected, dir_ / "narrow.safetensors").ok());
    auto widened = LoadNielsWeights(dir_ / "narrow.safetensors", config_, Dtype::kF32);
    ASSERT_TRUE(widened.ok()) << widened.status().ToString();
    EXPECT_EQ(widened->dtype(), Dtype::kF32);
    EXPECT_EQ(widened->tok_emb.ToFloats(), expected->tok_emb.ToFloats());
  }
}

TEST_F(WeightsTest, ValueBeyondF16RangeIsRefusedNamingTheTensor) {
  TensorList tensors = ValidTensors();
  Get(tensors, "blocks.1.mlp.fc_out.weight").Set(2 * config_.d_ff + 3, 70000.0f);  // [C, d_ff] at (2, 3)
  ASSERT_TRUE(WriteHostSafetensors(Path(), tensors).ok());
  auto refused = LoadNielsWeights(Path(), config_, Dtype::kF16);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr(Path().string()), HasSubstr("tensor blocks.1.mlp.fc_out.weight"), HasSubstr("f16")));
  EXPECT_TRUE(LoadNielsWeights(Path(), config_, Dtype::kBF16).ok()) << "bf16 has f32's range";
}

// A data section that does not start aligned (the header padded to an odd length): the tensors are
// copied into aligned buffers instead of being used in place, with the same values.
TEST_F(WeightsTest, MisalignedDataIsCopiedNotMisused) {
  const Weights original = RandomWeights(config_, 9);
  ASSERT_TRUE(SaveNielsWeights(original, Path()).ok());
  const std::string bytes = niels::testing::ReadFile(Path());
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
  niels::testing::WriteRawSafetensors(Path(), bytes.substr(8, header_length) + " ", bytes.substr(8 + header_length));
  auto loaded = LoadNielsWeights(Path(), config_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto file = std::static_pointer_cast<const SafetensorsFile>(loaded->backing.front());
  EXPECT_EQ(BytesWithin(*loaded, file->mapping_data(), file->mapping_size()), 0);
  const auto got = NielsNamed(*loaded), want = NielsNamed(original);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].second.ToFloats(), want[i].second.ToFloats()) << got[i].first;
}

TEST_F(WeightsTest, LmHeadEqualToTokEmbIsAccepted) {
  TensorList tensors = ValidTensors();
  tensors.emplace_back("lm_head.weight", Get(tensors, "tok_emb.weight"));
  ASSERT_TRUE(WriteHostSafetensors(Path(), tensors).ok());
  auto loaded = LoadNielsWeights(Path(), config_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->tok_emb.ToFloats(), Get(tensors, "tok_emb.weight").Floats());
}

// Malformed case: lm_head present but not equal to tok_emb.
TEST_F(WeightsTest, LmHeadNotEqualToTokEmb) {
  TensorList tensors = ValidTensors();
  HostTensor head = Get(tensors, "tok_emb.weight");
  head.Set(3 * config_.width + 5, head.At(3 * config_.width + 5) + 1e-3f);
  tensors.emplace_back("lm_head.weight", head);
  ExpectInvalid(tensors, {"lm_head.weight", "not equal to tok_emb.weight"});
}

// Malformed case: missing tensor.
TEST_F(WeightsTest, MissingTensor) {
  TensorList tensors = ValidTensors();
  std::erase_if(tensors, [](const auto& p) { return p.first == "blocks.1.mlp.fc_g.bias"; });
  ExpectInvalid(tensors, {"missing tensor blocks.1.mlp.fc_g.bias [24]"});
}

// Malformed case: extra tensor.
TEST_F(WeightsTest, ExtraTensor) {
  TensorList tensors = ValidTensors();
  tensors.emplace_back("blocks.2.ln1.weight", HostTensor::Filled({16}, 1.0f));
  ExpectInvalid(tensors, {"unexpected tensor blocks.2.ln1.weight"});
}

// Malformed case: wrong shape.
TEST_F(WeightsTest, WrongShape) {
  TensorList tensors = ValidTensors();
  Get(tensors, "blocks.1.attn.qkv.weight") = HostTensor::Filled({48, 8}, 0.0f);
  ExpectInvalid(tensors, {"tensor blocks.1.attn.qkv.weight has shape [48, 8], expected [48, 16]"});
}

// Malformed case: tensors of different dtypes in one file.
TEST_F(WeightsTest, MixedDtypesAreRefusedNamingTheTensor) {
  TensorList tensors = ValidTensors();
  Get(tensors, "blocks.0.attn.proj.weight") = Get(tensors, "blocks.0.attn.proj.weight").To(SafetensorsDtype::kF16);
  ExpectInvalid(tensors, {"tensor blocks.0.attn.proj.weight has dtype F16 but tok_emb.weight has F32", "one dtype"});
}

// Malformed case: wrong dtype.
TEST_F(WeightsTest, WrongDtype) {
  for (auto dtype : {SafetensorsDtype::kF64, SafetensorsDtype::kI64, SafetensorsDtype::kU8}) {
    SCOPED_TRACE(std::string(SafetensorsDtypeName(dtype)));
    TensorList tensors = ValidTensors();
    Get(tensors, "ln_f.weight") = Get(tensors, "ln_f.weight").To(dtype);
    ExpectInvalid(tensors, {"tensor ln_f.weight has dtype", "expected F32, F16 or BF16"});
  }
}

// Malformed case: safetensors header longer than the file (through LoadWeights).
TEST_F(WeightsTest, HeaderLongerThanFile) {
  niels::testing::WriteRawSafetensors(Path(), R"({"tok_emb.weight":{}})", "", /*header_length=*/1 << 20);
  auto w = LoadNielsWeights(Path(), config_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), AllOf(HasSubstr(Path().string()), HasSubstr("longer than the file")));
}

// Malformed case: data offsets past the end (a truncated file).
TEST_F(WeightsTest, TruncatedFileHasOffsetsPastTheEnd) {
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 2), Path()).ok());
  const std::string bytes = niels::testing::ReadFile(Path());
  niels::testing::WriteFile(Path(), bytes.substr(0, bytes.size() - 10));
  auto w = LoadNielsWeights(Path(), config_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  // SaveWeights writes ln_f.weight last, so its range is the one cut off.
  EXPECT_THAT(w.status().message(),
              AllOf(HasSubstr(Path().string()), HasSubstr("tensor ln_f.weight"), HasSubstr("past the end")));
}

TEST_F(WeightsTest, ConfigWithOtherVocabNamesTokEmb) {
  ASSERT_TRUE(WriteHostSafetensors(Path(), ValidTensors()).ok());
  config_.vocab_size = 51;
  auto w = LoadNielsWeights(Path(), config_);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(),
              AllOf(HasSubstr("tok_emb.weight has shape [50, 16], expected [51, 16]"), HasSubstr("V = 51")));
}

TEST_F(WeightsTest, MissingFileIsNotFound) {
  auto w = LoadNielsWeights(Path(), config_);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr(Path().string()));
}

// A config.json with a huge L (or d_ff) is refused by comparing it with what the file can hold,
// before anything is built per layer (it used to build 10 * L expected tensor names first).
TEST_F(WeightsTest, ConfigFarLargerThanTheFileIsRefusedBeforeAllocating) {
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 1), Path()).ok());
  for (auto [layers, d_ff] : {std::pair<int64_t, int64_t>{int64_t{1} << 24, 24}, {2, int64_t{1} << 24}}) {
    ModelConfig huge = config_;
    huge.layers = layers;
    huge.d_ff = d_ff;
    auto w = LoadNielsWeights(Path(), huge);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(w.status().message(), AllOf(HasSubstr(Path().string()), HasSubstr("L = " + std::to_string(layers)),
                                            HasSubstr("parameters")));
  }
}

// A model file rewritten in place while mapped is detected; one replaced by rename is not (the
// mapping keeps the old file, which is what every writer of ours does).
TEST_F(WeightsTest, InPlaceRewriteIsDetectedAndRenameIsNot) {
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 1), Path()).ok());
  auto file = SafetensorsFile::Open(Path());
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->CheckUnchanged().ok());
  // Replaced by rename (SaveWeights writes a temporary file and renames it): still fine.
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 2), Path()).ok());
  EXPECT_TRUE((*file)->CheckUnchanged().ok());
  auto second = SafetensorsFile::Open(Path());
  ASSERT_TRUE(second.ok());
  // Truncated in place: refused.
  std::filesystem::resize_file(Path(), (*second)->mapping_size() - 4);
  const common::Status changed = (*second)->CheckUnchanged();
  EXPECT_EQ(changed.code(), StatusCode::kUnavailable);
  EXPECT_THAT(changed.message(), AllOf(HasSubstr(Path().string()), HasSubstr("modified in place")));
}

TEST_F(WeightsTest, WritingLeavesNoTemporaryFiles) {
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 1), Path()).ok());
  ASSERT_TRUE(SaveNielsWeights(RandomWeights(config_, 2), Path()).ok());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace niels::daemon::loaders
