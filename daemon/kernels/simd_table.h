#pragma once
// Internal to daemon/kernels: the table of one instruction-set implementation of the kernels of
// simd_kernels.h. simd_portable.cc, simd_avx2.cc and simd_avx512.cc each define one (the latter two
// compiled with their -m flags); simd_kernels.cc picks one at run time.
//
// The per-ISA files include nothing but this header, <cstdint> and <immintrin.h>, and keep all
// their code in an anonymous namespace: an inline function shared with other files could otherwise
// be emitted with AVX-512 instructions and picked by the linker for every caller.

#include <cstdint>

#include "daemon/kernels/attend_args.h"

namespace niels::daemon::kernels::simd {

// The arguments of DotRows (simd_kernels.h); dtype as in kernels::Dtype (0 f32, 1 f16, 2 bf16).
struct DotRowsArgs {
  const void* w;  // [*, in] of the table entry's weight dtype
  int64_t in;
  const float* x;  // rows of `in` floats, x_stride apart
  int64_t x_stride;
  int64_t rows;
  const float* bias;  // or nullptr
  float* y;
  int64_t y_stride;
  int64_t prefetch_end;  // weight rows below this index may be prefetched (>= o_end)
};

using DotRowsFn = void (*)(const DotRowsArgs& args, int64_t o_begin, int64_t o_end);
// Attend (simd_kernels.h) over KV blocks of the entry's dtype.
using AttendFn = void (*)(const AttendArgs& args);
using ToFloatFn = void (*)(const void* src, int64_t n, float* dst);
using FromFloatFn = void (*)(const float* src, int64_t n, void* dst);
// out[i] = exp(x[i]) for i < n (in place allowed): the kernels' own exp (simd_kernels.h).
using ExpFn = void (*)(const float* x, int64_t n, float* out);
using SoftmaxFn = void (*)(float* scores, int64_t m, float scale);
using SiluMulFn = void (*)(const float* g, float* a, int64_t n);

struct KernelTable {
  const char* name;
  DotRowsFn dot_rows[3];  // indexed by dtype (of the weights)
  AttendFn attend[3];     // indexed by dtype (of the KV cache)
  ToFloatFn to_float[3];
  FromFloatFn from_float[3];
  ExpFn exp;
  SoftmaxFn softmax;
  SiluMulFn silu_mul;
};

// The arguments of DotRowsQuantized (simd_kernels.h): weight rows of a block type against rows of
// activations quantized for it (quant_activations.h; the layout's offsets are passed as numbers,
// since the per-ISA files include nothing that defines inline functions).
struct QuantDotArgs {
  const void* w;  // [*, in] of the entry's block type, w_row_bytes per row
  int64_t in;
  int64_t w_row_bytes;
  const void* x;  // quantized activation rows, x_row_bytes apart
  int64_t x_row_bytes;
  int64_t x_d_offset, x_sums_offset, x_starts_offset;  // ActivationLayout's offsets
  int64_t rows;
  const float* bias;  // or nullptr
  float* y;
  int64_t y_stride;
  int64_t prefetch_end;  // weight rows below this index may be prefetched (>= o_end)
};
using QuantDotFn = void (*)(const QuantDotArgs& args, int64_t o_begin, int64_t o_end);

// The arguments of QuantizeActivations: an ActivationLayout (quant_activations.h) spelled out.
struct QuantizeActsArgs {
  int64_t in, block, padded;
  int32_t bias;
  int64_t d_offset, sums_offset, starts_offset, row_bytes;
};
// Rows of x (x_stride apart) into rows of row_bytes at `out`, QuantizeActivationRow's bytes.
using QuantizeActsFn = void (*)(const QuantizeActsArgs& layout, const float* x, int64_t x_stride, int64_t rows,
                                void* out);

// The block types of 32 values, as the per-ISA files name them (they see no Dtype).
enum class Block32Type : uint8_t { kQ8_0, kQ4_0, kQ5_0 };

// One instruction set's kernels for the block types (quant weights x quantized activations),
// indexed by dtype - kQ8_0: q8_0, q4_0, q4_k, q5_k, q6_k, q5_0; and its activation quantizer.
struct QuantKernelTable {
  const char* name;
  QuantDotFn dot[6];
  QuantizeActsFn quantize;
};
// A buffer of at least `bytes` bytes, 64-byte aligned, owned by the calling thread (grown, never
// shrunk; valid until its next call on the thread): the AMX kernels' repacked weights.
void* ScratchBuffer(int64_t bytes);

// The scalar activation quantizer (quant_activations.cc's definition), row by row.
void PortableQuantizeActs(const QuantizeActsArgs& layout, const float* x, int64_t x_stride, int64_t rows, void* out);

const KernelTable& PortableTable();
const QuantKernelTable& PortableQuantTable();
// f32 -> bf16, round to nearest even (scalar; every table uses it).
void PortableF32ToBF16(const float* src, int64_t n, void* dst);
#if defined(__x86_64__)
const KernelTable& Avx2Table();    // REQUIRES (to call its functions): avx2, fma, f16c
const KernelTable& Avx512Table();  // REQUIRES: avx512f, avx512bw, avx512vl, avx512dq, fma, f16c
const QuantKernelTable& Avx2QuantTable();        // REQUIRES: avx2, fma, f16c
const QuantKernelTable& Avx512VnniQuantTable();  // REQUIRES: Avx512Table's, avx512vnni
// Avx512VnniQuantTable's with AMX-INT8 for the prefill tiles of every block type (simd_quant_amx.cc).
// REQUIRES: Avx512VnniQuantTable's, amx-tile, amx-int8, and the kernel's grant of the tile data
// (AmxGranted, simd_kernels.cc).
const QuantKernelTable& Avx512AmxQuantTable();
// Avx512VnniQuantTable's q8_0, q4_0 or q5_0 kernel for weight rows [o_begin, o_end) and activation
// rows [r_begin, r_end) only (what the AMX tiles leave over).
void Avx512Block32Rows(const QuantDotArgs& args, Block32Type type, int64_t o_begin, int64_t o_end, int64_t r_begin,
                       int64_t r_end);
#endif

}  // namespace niels::daemon::kernels::simd
