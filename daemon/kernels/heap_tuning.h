#pragma once
// Process-wide settings for the kernels' CPU work that do not belong to one object. nielsd (on the
// engine thread) and the benchmarks call TuneHeapForActivations() once at startup, before the first
// forward pass.
//
// All inference work -- prefill, decode, the uncached forward -- runs on the WorkerPool given to the
// Transformer (worker_pool.h), which its owner sizes (nielsd: --threads). Nothing else starts
// threads: nielsd loads no libtorch, no BLAS and no OpenMP. (Training and the tools that use
// libtorch set up its threads with tools/torch/torch_threads.h.)

#include <string>

#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::kernels {

// Tunes glibc malloc to keep large activation buffers in the heap (no mmap/munmap and page faults
// per call; see heap_tuning.cc). Not thread-safe: call once from main or the engine thread before
// any model work.
void TuneHeapForActivations();

// Hands the heap's free pages back to the kernel (glibc's malloc_trim): the activation buffers that
// TuneHeapForActivations keeps for reuse while the model runs (tens of MB after a batch of
// prefills). For an engine that has gone idle; the next step faults its buffers in again.
// Thread-safe (glibc locks each arena in turn).
void ReleaseFreedHeapMemory();

// One line describing the compute setup, e.g. "kernels 2 threads (avx512)"; `pool` is the model's
// pool.
std::string DescribeThreads(const WorkerPool& pool);

}  // namespace niels::daemon::kernels
