#pragma once
// ConfigureThreads: the one place that decides how the model's CPU work uses threads. nielsd and
// nielsd-bench both call it once at startup, before the first forward pass.
//
// Three thread pools can run model work: the model WorkerPool (worker_pool.h: the decode step's
// matrix-vector products and attention), libtorch's OpenMP pool (element-wise ops of prefill) and
// OpenBLAS's own pthread pool (the gemms of prefill and the uncached forward). On a small machine
// they compete for the same cores, and OpenMP workers that busy-wait after a parallel region steal
// the cores OpenBLAS needs (docs/ARCHITECTURE.md "Threads and ownership"). See threading.cc for
// the measured choice.

#include <string>

namespace niels::daemon::model {

enum class ThreadSetup {
  // Default. libtorch intra-op threads = 1, OpenBLAS threads = n, model WorkerPool threads = n:
  // matrix products use every core and no OpenMP worker spins next to them.
  kBlasThreads,
  // libtorch intra-op threads = n and OpenBLAS threads = n (libtorch's own default), model
  // WorkerPool threads = n. Kept for comparison in nielsd-bench (--thread-setup torch).
  kTorchThreads,
};

// Applies `setup` for n >= 1 threads (n <= 0 means the number of cores), and tunes glibc malloc to
// keep large activation buffers in the heap (no mmap/munmap and page faults per op; see
// threading.cc). Not thread-safe: call once from main before starting the engine thread.
void ConfigureThreads(int n, ThreadSetup setup = ThreadSetup::kBlasThreads);

// One line describing the effective setup, e.g.
// "torch intra-op 1, OpenBLAS 2 (OpenBLAS 0.3.21 ...), matvec 2 (avx2+fma)".
std::string DescribeThreads();

}  // namespace niels::daemon::model
