// The block formats against ggml itself: libggml-base.so of node-llama-cpp's prebuilt llama.cpp
// (scripts/install_references.sh; NIELS_GGML_BASE_LIB is its path, set by CMake, which builds
// this suite only when the library is there). Its exported dequantize_row_<type> and
// quantize_row_<type>_ref are ggml's reference code for GGUF's blocks.
//   - ggml's dequantization of random blocks (edge scales included) == DequantizeBlocks, bitwise;
//   - ggml's reference quantizer on many kinds of input == QuantizeBlocks, byte for byte.

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_blocks.h"

#ifndef NIELS_GGML_BASE_LIB
#error "NIELS_GGML_BASE_LIB: the path of ggml's libggml-base.so (tests/CMakeLists.txt)"
#endif

namespace niels::daemon::kernels {
namespace {

using DequantizeRowFn = void (*)(const void* blocks, float* y, int64_t k);
using QuantizeRowFn = void (*)(const float* x, void* blocks, int64_t k);

constexpr Dtype kBlockTypes[] = {Dtype::kQ8_0, Dtype::kQ4_0, Dtype::kQ4_K, Dtype::kQ5_K, Dtype::kQ6_K, Dtype::kQ5_0};

std::string GgmlName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kQ4_K: return "q4_K";
    case Dtype::kQ5_K: return "q5_K";
    case Dtype::kQ6_K: return "q6_K";
    default: return std::string(DtypeName(dtype));
  }
}

class GgmlTest : public ::testing::TestWithParam<Dtype> {
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
  Dtype dtype() const { return GetParam(); }
  static void* library_;
};
void* GgmlTest::library_ = nullptr;

TEST_P(GgmlTest, DequantizationEqualsGgmlsBitForBit) {
  auto ggml_dequantize = Symbol<DequantizeRowFn>("dequantize_row_" + GgmlName(dtype()));
  ASSERT_NE(ggml_dequantize, nullptr);
  const int64_t values = DtypeBlockElements(dtype()), bytes = DtypeBlockBytes(dtype());
  std::mt19937 rng(41);
  const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8123, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x7c00, 0x7e00};
  const int count = 3000;
  std::vector<unsigned char> blocks(static_cast<size_t>(count * bytes));
  for (auto& b : blocks) b = static_cast<unsigned char>(rng());
  for (int k = 0; k < count; ++k) {  // f16 scales: edge values in the first blocks, then random finite ones
    unsigned char* b = blocks.data() + k * bytes;
    const int n_scales = dtype() == Dtype::kQ4_K || dtype() == Dtype::kQ5_K ? 2 : 1;
    for (int s = 0; s < n_scales; ++s) {
      unsigned char* p = dtype() == Dtype::kQ6_K ? b + 208 : b + 2 * s;
      uint16_t h = static_cast<uint16_t>(p[0] | p[1] << 8);
      h = k < 400 ? edges[(k + 3 * s) % std::size(edges)] : static_cast<uint16_t>(h & 0x7bff) | (h & 0x8000);
      p[0] = static_cast<unsigned char>(h);
      p[1] = static_cast<unsigned char>(h >> 8);
    }
  }
  std::vector<float> ours(count * values), theirs(count * values);
  DequantizeBlocks(dtype(), blocks.data(), count, ours.data());
  ggml_dequantize(blocks.data(), theirs.data(), count * values);
  for (int64_t i = 0; i < count * values; ++i) {
    ASSERT_EQ(std::memcmp(&ours[i], &theirs[i], 4), 0)
        << "block " << i / values << " value " << i % values << ": " << ours[i] << " vs ggml " << theirs[i];
  }
}

// Inputs of every kind the quantizers branch on: normal values at several magnitudes, uniform,
// heavy-tailed with outliers, all positive / all negative (the min clamps at 0), constant, zeros,
// one spike, tiny values (scales in f16's subnormal range or below, and in float's), and values
// with many ties.
std::vector<float> QuantizerInputs(int64_t block) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x;
  auto add_block = [&](auto&& value) {
    for (int64_t i = 0; i < block; ++i) x.push_back(value(i));
  };
  for (float sigma : {1.0f, 0.02f, 300.0f, 1e-3f, 1e-6f}) {
    for (int r = 0; r < 40; ++r) add_block([&](int64_t) { return sigma * normal(rng); });
  }
  for (int r = 0; r < 40; ++r) add_block([&](int64_t) { return uniform(rng); });
  for (int r = 0; r < 40; ++r) {
    add_block([&](int64_t) {
      const float v = normal(rng);
      return rng() % 50 == 0 ? 40.0f * v : v;
    });
  }
  for (int r = 0; r < 20; ++r) add_block([&](int64_t) { return std::fabs(normal(rng)) + 0.5f; });
  for (int r = 0; r < 20; ++r) add_block([&](int64_t) { return -std::fabs(normal(rng)) - 0.25f; });
  add_block([](int64_t) { return 0.0f; });
  add_block([](int64_t) { return 2.5f; });
  add_block([](int64_t) { return -0.75f; });
  add_block([](int64_t i) { return i == 5 ? 7.0f : 0.0f; });
  add_block([block](int64_t i) { return i == block / 2 ? -1e-20f : 0.0f; });
  // Scales that are subnormal floats with an infinite inverse (q8_0, q4_0: levels of inf or NaN,
  // which ggml's x86-64 cast turns into INT32_MIN's low byte).
  add_block([](int64_t i) { return i == 3 ? 2e-38f : 0.0f; });
  add_block([](int64_t i) { return static_cast<float>(i % 3 - 1) * 1e-37f; });
  for (int r = 0; r < 10; ++r) add_block([&](int64_t) { return 1e-9f * normal(rng); });
  for (int r = 0; r < 20; ++r) add_block([&](int64_t) { return 0.125f * static_cast<float>(rng() % 17) - 1.0f; });
  for (int r = 0; r < 10; ++r) add_block([&](int64_t i) { return static_cast<float>(i % 7) - 3.0f; });
  return x;
}

TEST_P(GgmlTest, QuantizerGivesGgmlsReferenceBlocks) {
  auto ggml_quantize = Symbol<QuantizeRowFn>("quantize_row_" + GgmlName(dtype()) + "_ref");
  ASSERT_NE(ggml_quantize, nullptr);
  const int64_t values = DtypeBlockElements(dtype()), bytes = DtypeBlockBytes(dtype());
  const auto x = QuantizerInputs(values);
  const int64_t n = static_cast<int64_t>(x.size()), count = n / values;
  std::vector<unsigned char> ours(static_cast<size_t>(count * bytes)), theirs(ours.size());
  QuantizeBlocks(dtype(), x.data(), n, ours.data());
  ggml_quantize(x.data(), theirs.data(), n);
  for (int64_t k = 0; k < count; ++k) {
    ASSERT_EQ(std::memcmp(ours.data() + k * bytes, theirs.data() + k * bytes, static_cast<size_t>(bytes)), 0)
        << "block " << k << " of " << count << " (input value " << x[k * values] << "...)";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBlockType, GgmlTest, ::testing::ValuesIn(kBlockTypes),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(DtypeName(info.param)); });

}  // namespace
}  // namespace niels::daemon::kernels
