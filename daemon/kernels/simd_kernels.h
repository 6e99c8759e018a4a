#pragma once
// The few serial float loops the decode step spends its time in, each with an AVX2+FMA version
// picked at run time when the CPU has it (the build targets plain x86-64) and a portable one.
// Plain float pointers, row-major, no libtorch. Parallel callers split the work themselves
// (matvec.h, forward_step.h).

#include <cstdint>

namespace niels::daemon::kernels::simd {

// y[r * y_stride + o] = bias[o] + sum_i w[o * in + i] * x[r * in + i]
// for o in [o_begin, o_end) and r < rows; bias may be nullptr (no bias). Each weight row is read
// from memory once for all rows of x; above 8 rows of x the products run as a GEMM-shaped tile
// (4 weight rows x 3 rows of x in registers). Every dot product is summed in 8 float lanes, so y
// differs from a serial sum by rounding only.
// Batch invariance (a contract the engine relies on): y[r, o] is bitwise the same whatever `rows`,
// the other rows of x and the o range are -- every (r, o) is the same chain of operations.
void DotRows(const float* w, int64_t in, const float* x, int64_t rows, const float* bias, float* y,
             int64_t y_stride, int64_t o_begin, int64_t o_end);

// out[i] = sum_j p[j] * rows[j * n + i] for i < n: the p-weighted sum of m rows of length n
// (attention's probabilities times the value rows). Sums run over j in order. With `accumulate` the
// sums continue from out's values, so rows given in several calls (KV blocks) sum bitwise as in one.
void WeightedSumRows(const float* p, const float* rows, int64_t m, int64_t n, float* out, bool accumulate = false);

// The implementation in use: "avx2+fma" or "portable".
const char* Name();

// For tests only: true switches to the portable implementation, false back to the one picked for
// this CPU. Not thread-safe: call while no kernel runs.
void ForcePortableForTesting(bool portable);

}  // namespace niels::daemon::kernels::simd
