#pragma once
// Encoding float values into the ggml types niels-quantize writes, and the checks around it.
//   - q8_0, q4_0, q5_0, q4_K, q5_K, q6_K: daemon/kernels' QuantizeBlocks (ggml's reference
//     quantizers, no importance matrix); q5_1: legacy_blocks.h; f16, bf16: round to nearest even
//     (ggml's conversion); f32: as is.
//   - Before: every value must be finite, and for a block type at most kMaxQuantizedMagnitude in
//     magnitude (beyond it every block type's f16 scale overflows, so llama.cpp refuses it too,
//     and the quantizers' intermediate sums would overflow).
//   - After: every block's f16 scales and every f16 value must be finite, as ggml_validate_row_data
//     demands (llama.cpp refuses such rows, so a file that holds them would not load).
// Pure functions; safe from any thread.

#include <cstdint>
#include <optional>

#include "daemon/formats/ggml_type.h"

namespace niels::tools::quantize {

namespace formats = ::niels::daemon::formats;

inline constexpr float kMaxQuantizedMagnitude = 1e9f;

// True for the types EncodeValues writes: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K.
bool CanEncode(formats::GgmlType type);

// The index of the first value that is not finite, or for a block `target` beyond
// kMaxQuantizedMagnitude; nullopt when all are fine.
std::optional<int64_t> FirstUnencodableValue(formats::GgmlType target, const float* values, int64_t n);

// Writes n values (a multiple of target's block size) as target into dst (n / block_size blocks).
// REQUIRES: CanEncode(target); FirstUnencodableValue(target, src, n) is nullopt.
void EncodeValues(formats::GgmlType target, const float* src, int64_t n, void* dst);

// The index of the first block of `blocks` blocks of `type` at data whose f16 scale (q types) or
// value (f16) is infinite or NaN; nullopt when all are finite (always for f32 and bf16).
std::optional<int64_t> FirstInvalidBlock(formats::GgmlType type, const void* data, int64_t blocks);

}  // namespace niels::tools::quantize
