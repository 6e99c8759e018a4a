#pragma once
// MatVec: the matrix products of the model, y = x @ weight^T + bias: a few rows of x in a decode step
// (one row per sequence of the batch), hundreds in a prefill (one per token).
//
// A decode step reads every weight once per token, so its speed is memory bandwidth: what matters is
// streaming the weight at full speed on every core. BLAS gemm would first repack the weight, and
// OpenBLAS's sgemv read only ~27 GB/s on 2 cores (a python3-torch probe over the `personal`
// preset's 86 MB, same OpenBLAS), about half of what nielsd-bench measures for the machine; this
// kernel splits the weight's rows among the threads of a WorkerPool and reads each weight row once
// for all rows of x (1.2 ms for those 86 MB on 2 threads, 2.7 ms on 1).
//
// With 16-bit weights (f16, bf16) a decode step widens each weight as it loads it (simd_kernels.h),
// so it reads half the bytes; a prefill widens a slice of 64 weight rows x 512 columns once into
// a per-thread buffer and runs every row of x against it. With GGUF block types (q8_0, q4_0,
// q5_0, q4_k, q5_k, q6_k: 8.5 to 4.5 bits a weight, quant_blocks.h) the rows of x are first
// quantized to 8 bits per block, once per call (quant_activations.h: what is rounded where), and
// the kernels sum exact integer products per block (simd_kernels.h, DotRowsQuantized). A prefill
// runs the same chains as a GEMM: register tiles of 4 weight rows x 6 (or 3) rows of x.
//
// No libtorch here: plain pointers, row-major.

#include <cstdint>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

// y[r, o] = bias[o] + sum_i weight[o, i] * x[r, i]  for r < rows, o < out.
// weight [out, in] of any dtype, x [rows, in], y [rows, out], bias [out] or nullptr (then no bias);
// all row-major and contiguous; y must not overlap the inputs. Sums are float32 (16 or 8 partial
// sums per dot product), so results differ from a serial sum by rounding only -- and for a block
// type by the 8-bit rounding of x (REQUIRES: in a multiple of its block, 32 or 256). The weight's output
// rows are handed to the pool's threads in blocks from a shared counter (whoever is free takes the
// next). Row r of y is bitwise independent of `rows`, of the other rows of x, of the pool's thread
// count and of which thread computed it (batch invariance). y_stride: floats from one row of y to
// the next (0: out), so that a product can fill some columns of a wider matrix.
void MatVec(Matrix weight, int64_t out, int64_t in, const float* bias, const float* x, int64_t rows, float* y,
            WorkerPool& pool, int64_t y_stride = 0);

// The kernels picked for this CPU at run time: "avx512", "avx2+fma" or "portable".
const char* MatVecKernelName();

}  // namespace niels::daemon::kernels
