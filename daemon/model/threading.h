#pragma once
// ConfigureThreads: the one place that decides how the model's CPU work uses threads. nielsd and
// nielsd-bench both call it once at startup, before the first forward pass.
//
// Three thread pools can run model work: the WorkerPool given to the Transformer
// (daemon/kernels/worker_pool.h: the decode step's matrix products and attention; its owner sizes it,
// usually to the same n), libtorch's OpenMP pool (element-wise ops of prefill) and
// OpenBLAS's own pthread pool (the gemms of prefill and the uncached forward). On a small machine
// they compete for the same cores, and OpenMP workers that busy-wait after a parallel region steal
// the cores OpenBLAS needs (docs/ARCHITECTURE.md, "Threads and ownership"). See threading.cc for
// the measured choice.

#include <string>

#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::model {

enum class ThreadSetup {
  // Default. libtorch intra-op threads = 1, OpenBLAS threads = n (and the decode WorkerPool n):
  // matrix products use every core and no OpenMP worker spins next to them.
  kBlasThreads,
  // libtorch intra-op threads = n and OpenBLAS threads = n (libtorch's own default). Kept for comparison in nielsd-bench (--thread-setup torch).
  kTorchThreads,
};

// Applies `setup` for n >= 1 threads (n <= 0 means the number of cores), and tunes glibc malloc to
// keep large activation buffers in the heap (no mmap/munmap and page faults per op; see
// threading.cc). Not thread-safe: call once from main before starting the engine thread.
void ConfigureThreads(int n, ThreadSetup setup = ThreadSetup::kBlasThreads);

// One line describing the effective setup, e.g.
// "torch intra-op 1, OpenBLAS 2 (OpenBLAS 0.3.21 ...), matvec 2 (avx2+fma)"; `pool` is the decode pool.
std::string DescribeThreads(const kernels::WorkerPool& pool);

}  // namespace niels::daemon::model
