#include "daemon/kernels/heap_tuning.h"

#include <malloc.h>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::kernels {

// Activations of a prefill or uncached forward ([512, d_ff] rows) are megabytes each. With glibc's
// defaults they are mmap'd and unmapped, or trimmed from the heap top, on every call, and the page
// faults cost more than the arithmetic (prefill ran ~3x slower in nielsd-bench when it allocated per
// op). Keep such blocks in the heap and keep freed memory for reuse instead.
void TuneHeapForActivations() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

void ReleaseFreedHeapMemory() { malloc_trim(0); }

std::string DescribeThreads(const WorkerPool& pool) {
  return "kernels " + std::to_string(pool.threads()) + " threads (" + simd::Name() + ")";
}

}  // namespace niels::daemon::kernels
