#pragma once
// Kernels tests that run once per implementation (AVX-512, AVX2, portable), so that a machine with
// AVX-512 also executes the AVX2 and the portable code.

#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {

// "Avx512", "Avx2", "Portable": for test names.
inline std::string IsaName(simd::Isa isa) {
  switch (isa) {
    case simd::Isa::kAvx512: return "Avx512";
    case simd::Isa::kAvx2: return "Avx2";
    case simd::Isa::kPortable: return "Portable";
  }
  return "?";
}

inline simd::Isa IsaOf(simd::Isa isa) { return isa; }
template <typename... Rest>
simd::Isa IsaOf(const std::tuple<simd::Isa, Rest...>& param) {
  return std::get<0>(param);
}

// A parameterized test whose parameter is an Isa, or a tuple that starts with one: the body runs
// with that implementation forced (skipped when this CPU cannot run it), and the detected one is
// restored afterwards.
template <typename Param>
class ForcedIsaTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!simd::ForceIsaForTesting(isa())) GTEST_SKIP() << "this CPU cannot run " << IsaName(isa());
  }
  void TearDown() override { simd::ForceIsaForTesting(simd::Detected()); }
  simd::Isa isa() const { return IsaOf(this->GetParam()); }
};

}  // namespace niels::daemon::kernels
