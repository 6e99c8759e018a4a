#include "daemon/kernels/matvec.h"

#include <algorithm>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {
namespace {

// Output rows are handed out in blocks of this many (the kernels' tiles span 4 weight rows).
constexpr int64_t kRowBlock = 4;
// Below this many multiply-adds a product runs on the calling thread: waking the workers would
// cost more than it saves (a 384 x 384 product, 147k, is already worth splitting).
constexpr int64_t kMinParallelWork = 32 * 1024;

}  // namespace

void MatVec(Matrix weight, int64_t out, int64_t in, const float* bias, const float* x, int64_t rows, float* y,
            WorkerPool& pool) {
  if (out <= 0 || rows <= 0) return;
  if (pool.threads() == 1 || out * in * rows < kMinParallelWork) {
    simd::DotRows(weight, in, x, in, rows, bias, y, out, 0, out);
    return;
  }
  pool.Run([&](int part, int parts) {
    // Contiguous ranges of whole 4-row blocks, as equal as blocks allow.
    const int64_t blocks = (out + kRowBlock - 1) / kRowBlock;
    const int64_t begin = std::min(out, blocks * part / parts * kRowBlock);
    const int64_t end = std::min(out, blocks * (part + 1) / parts * kRowBlock);
    if (begin < end) simd::DotRows(weight, in, x, in, rows, bias, y, out, begin, end);
  });
}

const char* MatVecKernelName() { return simd::Name(); }

}  // namespace niels::daemon::kernels
