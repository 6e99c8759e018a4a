#include "daemon/kernels/matvec.h"

#include <algorithm>
#include <atomic>

#include <vector>

#include "daemon/kernels/quant_activations.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {

// Below this many multiply-adds a product runs on the calling thread: waking the workers would
// cost more than it saves (a 384 x 384 product, 147k, is already worth splitting).
constexpr int64_t kMinParallelWork = 32 * 1024;

// Output rows per block handed out to the threads, a multiple of the kernels' tiles (4 rows; 16
// for the 32-value block types). For a decode step: blocks of a sixteenth of the matrix, between
// 32 and 256 KiB (many blocks, so a thread that falls behind on a busy machine is covered by the
// others, but long enough that a 16-bit kernel's read-ahead stays inside the block: see MatVec).
// Block types had 32 KiB until 2026-11-27: with 2048 x 8192 q8_0 that was 4 rows, a quarter of a
// 16-row tile, and nielsd-quant-bench decoded it at 9 GB/s against 23 with whole tiles (8192 x
// 2048 q4_k 17 -> 21 GB/s with the larger blocks; medians of three alternations). For a prefill
// each block meets every row of x: 16-bit and f32 weights in blocks of the kernels' prefill group,
// 64 rows (simd_generic.h, kGroupRows: widened once per slice of columns and chunk of rows of x);
// block types in about 128 KiB (the block stays in L2 while the rows of x stream past), a multiple
// of the AMX kernels' 32-row panels: the rows a block leaves over run on the slower VNNI tiles
// (with blocks of 120 rows of a 1024-wide q8_0 matrix, a fifth of its rows did).
int64_t BlockRows(int64_t out, int64_t in, Dtype dtype, int64_t rows) {
  const int64_t row_bytes = RowBytes(dtype, in);
  if (rows <= 16) {
    const int64_t bytes = std::clamp<int64_t>(out * row_bytes / 16, 32 * 1024, 256 * 1024);
    // Whole tiles: the AVX-512 kernels of the 32-value block types run 16 weight rows at a time
    // (in the lanes), and a block of 4 or 12 rows cost as many instructions as 16.
    const int64_t tile = DtypeBlockElements(dtype) == 32 ? 16 : 4;
    return std::max<int64_t>(tile, bytes / row_bytes / tile * tile);
  }
  if (!IsQuantized(dtype)) return 64;  // the kernels' prefill group (simd_generic.h, kGroupRows)
  // At most 128 KiB, and at least 8 blocks where the matrix has 8 panels: a 384-row q4_0 matrix
  // was one block (one thread idle), a 1536-row one three.
  const int64_t cap = std::max<int64_t>(32, 128 * 1024 / row_bytes / 32 * 32);
  return std::clamp<int64_t>(out / 8 / 32 * 32, 32, cap);
}

// The calling thread's buffer for a product's quantized activations: 64-byte aligned, grown to the
// largest size asked for and kept (so the products of a steady stream of steps allocate nothing).
void* ActivationBuffer(int64_t bytes) {
  thread_local std::vector<unsigned char> buffer;
  if (static_cast<int64_t>(buffer.size()) < bytes + 64) buffer.resize(static_cast<size_t>(bytes + 64));
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + (64 - address % 64) % 64;
}

// A block-type weight: the rows of x are quantized once (split among the threads when there are
// many), then the output rows are split as for the other dtypes.
void QuantizedMatVec(Matrix weight, int64_t out, int64_t in, const float* bias, const float* x, int64_t rows,
                     float* y, int64_t y_stride, WorkerPool& pool) {
  const int64_t row_bytes = ActivationLayoutFor(weight.dtype, in).row_bytes;
  auto* xq = static_cast<unsigned char*>(ActivationBuffer(rows * row_bytes));
  const bool parallel = pool.threads() > 1 && out * in * rows >= kMinParallelWork;
  if (!parallel) {
    simd::QuantizeActivations(weight.dtype, x, in, rows, in, xq);
    simd::DotRowsQuantized(weight, in, xq, rows, bias, y, y_stride, 0, out, out);
    return;
  }
  if (rows >= 8) {
    pool.Run([&](int part, int parts) {
      const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
      simd::QuantizeActivations(weight.dtype, x + begin * in, in, end - begin, in, xq + begin * row_bytes);
    });
  } else {
    simd::QuantizeActivations(weight.dtype, x, in, rows, in, xq);
  }
  const int64_t block = BlockRows(out, in, weight.dtype, rows);
  const int64_t blocks = (out + block - 1) / block;
  std::atomic<int64_t> next{0};
  pool.Run([&](int, int) {
    for (int64_t b = next.fetch_add(1, std::memory_order_relaxed); b < blocks;
         b = next.fetch_add(1, std::memory_order_relaxed)) {
      simd::DotRowsQuantized(weight, in, xq, rows, bias, y, y_stride, b * block, std::min(out, (b + 1) * block), out);
    }
  });
}

}  // namespace

void MatVec(Matrix weight, int64_t out, int64_t in, const float* bias, const float* x, int64_t rows, float* y,
            WorkerPool& pool, int64_t y_stride) {
  if (out <= 0 || rows <= 0) return;
  if (y_stride == 0) y_stride = out;
  if (IsQuantized(weight.dtype)) {
    QuantizedMatVec(weight, out, in, bias, x, rows, y, y_stride, pool);
    return;
  }
  if (pool.threads() == 1 || out * in * rows < kMinParallelWork) {
    simd::DotRows(weight, in, x, in, rows, bias, y, y_stride, 0, out, out);
    return;
  }
  const int64_t block = BlockRows(out, in, weight.dtype, rows);
  const int64_t blocks = (out + block - 1) / block;
  // A decode step reads ahead only inside its block (w_rows 0): the next block is usually the
  // other thread's, and prefetching it into this core's L2 cost the decode a third of its
  // bandwidth (8192 x 2048 f16 on 2 threads of the Xeon: 16.2 GB/s against 23.1 with the same
  // blocks). A prefill (more than 16 rows) reads no weights ahead: its loop widens each slice of a
  // block once and reuses it from cache (simd_generic.h, PrefillRows).
  const int64_t read_ahead_rows = rows <= 16 ? 0 : out;
  std::atomic<int64_t> next{0};  // the next block to take, whichever thread takes it
  pool.Run([&](int, int) {
    for (int64_t b = next.fetch_add(1, std::memory_order_relaxed); b < blocks;
         b = next.fetch_add(1, std::memory_order_relaxed)) {
      simd::DotRows(weight, in, x, in, rows, bias, y, y_stride, b * block, std::min(out, (b + 1) * block),
                    read_ahead_rows);
    }
  });
}

const char* MatVecKernelName() { return simd::Name(); }

}  // namespace niels::daemon::kernels
