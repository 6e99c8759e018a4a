// KV spill through a real transformer: a cache written to disk and read back is the same cache
// (bit for bit, f32 and f16 KV alike), continuing from it gives the logits of the full forward, and a
// damaged or mismatched file (another model, history or KV dtype) leaves the cache empty so the
// caller recomputes.
#include "daemon/sessions/kv_spill.h"

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "tests/support/temp_files.h"
#include "tests/support/test_model.h"

namespace niels::daemon::sessions {
namespace {

namespace fs = std::filesystem;
const std::string kFingerprint = "0123456789abcdef0123456789abcdef";

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 37 + 5) % 300);
  return tokens;
}

using kernels::Dtype;

class KvSpillTest : public ::testing::Test {
 protected:
  model::ModelConfig config_ = testing::TinyConfig();
  model::Transformer model_{config_, model::RandomWeights(config_, 11)};
  testing::TempDir dir_;
};

// The same with the KV dtype as the parameter (the transformer's Forward cache too).
class KvSpillDtypeTest : public ::testing::TestWithParam<Dtype> {
 protected:
  model::ModelConfig config_ = testing::TinyConfig();
  model::Transformer model_{config_, model::RandomWeights(config_, 11), nullptr, GetParam()};
  testing::TempDir dir_;
};

TEST_P(KvSpillDtypeTest, ReadBackIsTheSameCacheAndContinuesLikeTheFullForward) {
  const std::vector<int32_t> tokens = Tokens(41);
  model::KvCache cache(config_, GetParam());
  model_.Prefill(std::span(tokens).first(40), cache);
  auto bytes = WriteKvSpill(cache, tokens, config_, kFingerprint, dir_ / "s.kv");
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, fs::file_size(dir_ / "s.kv"));
  // Header, checksum, one range (a 24-byte header) per block, layer and kind, and the elements as
  // stored: 2 bytes each in f16.
  const int64_t ranges = 2 * config_.layers * 3, elements = 2 * config_.layers * 40 * config_.width;
  EXPECT_EQ(static_cast<int64_t>(*bytes), 80 + 8 + 24 * ranges + elements * kernels::DtypeSize(GetParam()));

  model::KvCache restored(config_, GetParam());
  ASSERT_TRUE(ReadKvSpillInto(restored, tokens, 40, config_, kFingerprint, dir_ / "s.kv").ok());
  ASSERT_EQ(restored.length(), 40);
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    EXPECT_EQ(restored.KeysAsFloats(layer, 40), cache.KeysAsFloats(layer, 40));
    EXPECT_EQ(restored.ValuesAsFloats(layer, 40), cache.ValuesAsFloats(layer, 40));
  }
  // The next token on the restored cache: the same logits as on the original cache, and as the
  // plain full forward over all 41 tokens.
  model::KvCache* original_ptr = &cache;
  model::KvCache* restored_ptr = &restored;
  const std::vector<float> from_original = model_.Decode(std::span(tokens).subspan(40, 1), std::span(&original_ptr, 1));
  const std::vector<float> from_restored = model_.Decode(std::span(tokens).subspan(40, 1), std::span(&restored_ptr, 1));
  EXPECT_EQ(from_original, from_restored);
  // The forward step is chunk-invariant, so the full forward gives exactly the same row.
  EXPECT_EQ(from_restored, model_.Forward(tokens, /*last_only=*/true));
}

// A file written under one --kv-dtype is refused by a cache of the other (nielsd restarted with
// another --kv-dtype recomputes its sessions' caches): the cache stays empty and usable.
TEST_P(KvSpillDtypeTest, AFileOfTheOtherKvDtypeIsRefusedCleanly) {
  const Dtype other = GetParam() == Dtype::kF32 ? Dtype::kF16 : Dtype::kF32;
  const std::vector<int32_t> tokens = Tokens(30);
  model::KvCache cache(config_, other);
  model_.Prefill(tokens, cache);
  ASSERT_TRUE(WriteKvSpill(cache, tokens, config_, kFingerprint, dir_ / "s.kv").ok());
  model::KvCache restored(config_, GetParam());
  const common::Status read = ReadKvSpillInto(restored, tokens, 30, config_, kFingerprint, dir_ / "s.kv");
  EXPECT_FALSE(read.ok());
  EXPECT_THAT(read.message(), ::testing::HasSubstr("--kv-dtype"));
  EXPECT_EQ(restored.length(), 0);
  EXPECT_EQ(restored.bytes(), 0);
  // The caller recomputes: the cache takes a prefill as any empty one.
  EXPECT_EQ(model_.Prefill(tokens, restored), model_.Forward(tokens, /*last_only=*/true));
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, KvSpillDtypeTest, ::testing::Values(Dtype::kF32, Dtype::kF16),
                         [](const ::testing::TestParamInfo<Dtype>& info) {
                           return std::string(kernels::DtypeName(info.param));
                         });

TEST_F(KvSpillTest, MismatchOrDamageLeavesTheCacheEmpty) {
  const std::vector<int32_t> tokens = Tokens(30);
  model::KvCache cache(config_);
  model_.Prefill(tokens, cache);
  ASSERT_TRUE(WriteKvSpill(cache, tokens, config_, kFingerprint, dir_ / "s.kv").ok());

  auto expect_refused = [&](std::span<const int32_t> want_tokens, int64_t positions, const std::string& fingerprint,
                            const char* why) {
    model::KvCache restored(config_);
    EXPECT_FALSE(ReadKvSpillInto(restored, want_tokens, positions, config_, fingerprint, dir_ / "s.kv").ok()) << why;
    EXPECT_EQ(restored.length(), 0) << why;
    EXPECT_EQ(restored.bytes(), 0) << why;
  };
  std::vector<int32_t> edited = tokens;
  edited[3] += 1;
  expect_refused(edited, 30, kFingerprint, "history edited since the spill");
  expect_refused(tokens, 29, kFingerprint, "another length");
  expect_refused(tokens, 30, "ffffffffffffffffffffffffffffffff", "another model");
  std::string bytes = testing::ReadFile(dir_ / "s.kv");
  bytes[bytes.size() / 2] ^= 0x01;
  testing::WriteFile(dir_ / "s.kv", bytes);
  expect_refused(tokens, 30, kFingerprint, "one flipped bit");
}

}  // namespace
}  // namespace niels::daemon::sessions
