// q5_0 and q5_1 (legacy_blocks.h) against ggml itself: libggml-base.so of node-llama-cpp
// (NIELS_GGML_BASE_LIB, set by CMake). Its quantize_row_q5_{0,1}_ref must give our blocks byte for
// byte on inputs of every kind the quantizers branch on, and its dequantize_row_q5_{0,1} our
// values bit for bit on random blocks (edge scales included).

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/quantize/legacy_blocks.h"

#ifndef NIELS_GGML_BASE_LIB
#error "NIELS_GGML_BASE_LIB: the path of ggml's libggml-base.so (tests/CMakeLists.txt)"
#endif

namespace niels::tools::quantize {
namespace {

using QuantizeRowFn = void (*)(const float* x, void* blocks, int64_t k);
using DequantizeRowFn = void (*)(const void* blocks, float* y, int64_t k);

struct LegacyType {
  std::string name;
  int block_bytes;
  void (*quantize)(const float*, int64_t, void*);
  void (*dequantize)(const void*, int64_t, float*);
  int scales;  // f16 scales at the block's start (d; d and m)
};

const LegacyType kTypes[] = {{"q5_0", kQ5_0BlockBytes, QuantizeQ5_0, DequantizeQ5_0, 1},
                             {"q5_1", kQ5_1BlockBytes, QuantizeQ5_1, DequantizeQ5_1, 2}};

class LegacyBlocksTest : public ::testing::TestWithParam<LegacyType> {
 protected:
  static void SetUpTestSuite() {
    library_ = dlopen(NIELS_GGML_BASE_LIB, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << dlerror() << " (install it with scripts/install_references.sh)";
  }
  template <typename Fn>
  Fn Symbol(const std::string& name) {
    void* symbol = library_ != nullptr ? dlsym(library_, name.c_str()) : nullptr;
    EXPECT_NE(symbol, nullptr) << name;
    return reinterpret_cast<Fn>(symbol);
  }
  static void* library_;
};
void* LegacyBlocksTest::library_ = nullptr;

// Blocks of 32: Gaussians at several scales, uniform, outliers, one sign only, constants, zeros,
// spikes, ties, tiny values (scales below f16's range and subnormal floats whose inverse is
// infinite), large values.
std::vector<float> Inputs() {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x;
  auto add = [&x](auto&& value) {
    for (int i = 0; i < 32; ++i) x.push_back(value(i));
  };
  for (float sigma : {1.0f, 0.02f, 300.0f, 1e-3f, 1e-6f}) {
    for (int r = 0; r < 50; ++r) add([&](int) { return sigma * normal(rng); });
  }
  for (int r = 0; r < 50; ++r) add([&](int) { return uniform(rng); });
  for (int r = 0; r < 50; ++r) add([&](int) { return rng() % 40 == 0 ? 30.0f * normal(rng) : normal(rng); });
  for (int r = 0; r < 20; ++r) add([&](int) { return std::fabs(normal(rng)) + 0.5f; });
  for (int r = 0; r < 20; ++r) add([&](int) { return -std::fabs(normal(rng)) - 0.25f; });
  for (int r = 0; r < 20; ++r) add([&](int) { return 0.125f * static_cast<float>(rng() % 33) - 2.0f; });
  add([](int) { return 0.0f; });
  add([](int) { return 2.5f; });
  add([](int) { return -0.75f; });
  add([](int i) { return i == 7 ? 7.0f : 0.0f; });
  add([](int i) { return i == 20 ? -1e-20f : 0.0f; });
  add([](int i) { return i == 3 ? 2e-38f : 0.0f; });
  add([](int i) { return static_cast<float>(i % 3 - 1) * 1e-37f; });
  add([](int i) { return static_cast<float>(i % 5) * 3e-45f; });
  add([](int i) { return static_cast<float>(i - 16) * 1000.0f; });
  return x;
}

TEST_P(LegacyBlocksTest, QuantizerGivesGgmlsReferenceBlocks) {
  const LegacyType& type = GetParam();
  auto ggml_quantize = Symbol<QuantizeRowFn>("quantize_row_" + type.name + "_ref");
  ASSERT_NE(ggml_quantize, nullptr);
  const std::vector<float> x = Inputs();
  const int64_t n = static_cast<int64_t>(x.size()), blocks = n / 32;
  std::vector<unsigned char> ours(static_cast<size_t>(blocks * type.block_bytes), 0xAA), theirs(ours.size(), 0x55);
  type.quantize(x.data(), n, ours.data());
  ggml_quantize(x.data(), theirs.data(), n);
  for (int64_t b = 0; b < blocks; ++b) {
    ASSERT_EQ(std::memcmp(ours.data() + b * type.block_bytes, theirs.data() + b * type.block_bytes,
                          static_cast<size_t>(type.block_bytes)),
              0)
        << "block " << b << " of " << blocks << " (first value " << x[b * 32] << ")";
  }
}

TEST_P(LegacyBlocksTest, DequantizationEqualsGgmlsBitForBit) {
  const LegacyType& type = GetParam();
  auto ggml_dequantize = Symbol<DequantizeRowFn>("dequantize_row_" + type.name);
  ASSERT_NE(ggml_dequantize, nullptr);
  std::mt19937 rng(9);
  const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8123, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x7c00, 0x7e00};
  const int count = 3000;
  std::vector<unsigned char> blocks(static_cast<size_t>(count * type.block_bytes));
  for (auto& b : blocks) b = static_cast<unsigned char>(rng());
  for (int k = 0; k < count; ++k) {
    for (int s = 0; s < type.scales; ++s) {
      unsigned char* p = blocks.data() + k * type.block_bytes + 2 * s;
      uint16_t h = static_cast<uint16_t>(p[0] | p[1] << 8);
      h = k < 400 ? edges[(k + 3 * s) % std::size(edges)] : static_cast<uint16_t>((h & 0x7bff) | (h & 0x8000));
      p[0] = static_cast<unsigned char>(h);
      p[1] = static_cast<unsigned char>(h >> 8);
    }
  }
  std::vector<float> ours(count * 32), theirs(count * 32);
  type.dequantize(blocks.data(), count, ours.data());
  ggml_dequantize(blocks.data(), theirs.data(), count * 32);
  for (int64_t i = 0; i < count * 32; ++i) {
    ASSERT_EQ(std::memcmp(&ours[i], &theirs[i], 4), 0)
        << "block " << i / 32 << " value " << i % 32 << ": " << ours[i] << " vs ggml " << theirs[i];
  }
}

INSTANTIATE_TEST_SUITE_P(BothTypes, LegacyBlocksTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<LegacyType>& info) { return info.param.name; });

}  // namespace
}  // namespace niels::tools::quantize
