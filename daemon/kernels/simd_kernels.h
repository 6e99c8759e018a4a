#pragma once
// The serial loops the model spends its time in, each in three implementations picked at run time
// (the build targets plain x86-64): AVX-512 (avx512f/bw/vl/dq + FMA + F16C), AVX2 (+ FMA + F16C) and
// a portable one. Weights (and KV rows) may be f32, f16 or bf16 (dtype.h): 16-bit elements are
// widened to float as they are loaded (f16 with VCVTPH2PS, bf16 by a shift) and every sum is f32.
// Plain pointers, row-major, no libtorch. Parallel callers split the work themselves (matvec.h,
// daemon/model/forward_step.h).

#include <cstdint>

#include "daemon/kernels/attend_args.h"
#include "daemon/kernels/dtype.h"

namespace niels::daemon::kernels::simd {

// y[r * y_stride + o] = bias[o] + sum_i w[o, i] * x[r * x_stride + i]
// for o in [o_begin, o_end) and r < rows, w [*, in] of any dtype; bias may be nullptr (no bias).
// The products run in register tiles (4 weight rows x 6 rows of x with AVX-512, 4 x 3 otherwise),
// so a weight row is read once per tile. Up to 16 rows of x (decode) straight from the weights;
// more (prefill) K-blocked: 64 weight rows x 512 columns widened to f32 once into a per-thread
// buffer, met by chunks of 96 rows of x, each tile's accumulators saved between slices
// (simd_generic.h, PrefillRows). Every dot product is summed in the implementation's lanes
// (16, or 8) and the lanes in a fixed tree, so y differs from a serial sum by rounding only.
// Batch invariance (a contract the engine relies on): y[r, o] is bitwise the same whatever `rows`,
// the other rows of x and the o range are -- every (r, o) is the same chain of operations.
// w_rows: how many rows w has (w may then be read ahead up to that row, never past it; rows past
// o_end are only prefetched); 0 means o_end.
void DotRows(Matrix w, int64_t in, const float* x, int64_t x_stride, int64_t rows, const float* bias, float* y,
             int64_t y_stride, int64_t o_begin, int64_t o_end, int64_t w_rows = 0);

// Weights of a block type (quant_blocks.h) multiply activations quantized to 8 bits
// per block (quant_activations.h: what is rounded where): DotRows with such a w quantizes the rows
// of x itself (once per call) and runs DotRowsQuantized, whose every y[r, o] is one fixed chain of
// exact integer block sums folded into float accumulators (simd_quant_*.cc), so the batch
// invariance above holds for them too (AVX-512's prefill tiles may run on AMX-INT8: the same
// integer sums and float operations, so the same bits). Results differ between instruction sets,
// each within the tolerance matvec_quant_test states of the dequantized weights times x.
// QuantizeActivations: rows of x (x_stride apart) into `out`, ActivationLayoutFor(weight,
// in).row_bytes per row. REQUIRES: in a multiple of the weight's block.
void QuantizeActivations(Dtype weight, const float* x, int64_t x_stride, int64_t rows, int64_t in, void* out);
// DotRows for a block-type w over activations quantized for it (rows x row_bytes, contiguous).
void DotRowsQuantized(Matrix w, int64_t in, const void* xq, int64_t rows, const float* bias, float* y,
                      int64_t y_stride, int64_t o_begin, int64_t o_end, int64_t w_rows = 0);

// Causal attention of args.group query heads sharing one key/value head, for args.rows
// consecutive query rows of one sequence, over its KV blocks of `kv_dtype` elements
// (attend_args.h): per (head, row) the scores q . k_j (j up to its own position) times args.scale,
// their softmax (left in args.scores: the attention trace) and the probability-weighted sum of the
// values into args.out. One call walks all the blocks (a decode step is one call per key/value
// head). Keys and values are read once per register tile of (head, row) pairs, not once per row.
// Bits: a row's scores, probabilities and output depend on its query, position and the sequence's
// keys and values only -- not on the other rows or heads, their number, or how positions are split
// into blocks (every score and output column is one fixed chain of FMAs in position order; the
// softmax is Softmax's). REQUIRES: rows >= 1, group >= 1, the blocks cover positions
// [0, first_position + rows).
void Attend(const AttendArgs& args, Dtype kv_dtype);

// dst[i] = src[i] as float / narrowed to `dtype` (dtype.h's rounding; the same bits in every
// implementation). For a block type (n a multiple of its block): DequantizeBlocks / QuantizeBlocks
// of quant_blocks.h (scalar: the same code in every implementation).
void ToFloat(const void* src, Dtype dtype, int64_t n, float* dst);
void FromFloat(const float* src, int64_t n, Dtype dtype, void* dst);

// out[i] = exp(x[i]) (out may be x): relative error below 2e-7 (a few ulp), exp(x > 88.72) = inf,
// exp(x < -103.97) = 0, NaN stays NaN. The portable implementation calls std::exp.
void Exp(const float* x, int64_t n, float* out);

// In place: s[j] = exp(scale * s[j] - scale * max_k s[k]) / (the sum of those), j < m. REQUIRES m >= 1.
// The sum runs in the implementation's lanes, so a row's result depends on that row only.
void Softmax(float* s, int64_t m, float scale);

// a[i] *= g[i] / (1 + exp(-g[i])) (silu(g) * a, the MLP's gate), i < n.
void SiluMul(const float* g, float* a, int64_t n);

enum class Isa { kPortable, kAvx2, kAvx512 };

// The implementation in use: "avx512", "avx2+fma" or "portable".
const char* Name();
// The block types' implementation in use: "avx512-amx" (VNNI, and AMX-INT8 tiles for the prefill of
// q8_0 / q4_0 where the CPU has them and the kernel grants them), "avx512-vnni", "avx2" or
// "portable".
const char* QuantName();
// The best implementation this CPU runs (the one in use unless a test forces another).
Isa Detected();

// For tests only: switches to `isa` if this CPU can run it (returns false, and changes nothing,
// otherwise); ForceIsaForTesting(Detected()) switches back. Not thread-safe: call while no kernel
// runs.
bool ForceIsaForTesting(Isa isa);
// For tests only: with `enabled` false, the AVX-512 block-type kernels run without AMX (VNNI only);
// with true, with AMX where granted. Returns whether AMX is in use afterwards. Not thread-safe.
bool UseAmxForTesting(bool enabled);

}  // namespace niels::daemon::kernels::simd
