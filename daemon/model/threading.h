#pragma once
// ConfigureThreads: process-wide settings for the model's CPU work. nielsd (on the engine thread)
// and nielsd-bench call it once at startup, before the first forward pass.
//
// All inference work -- prefill, decode, the uncached forward -- runs on the WorkerPool given to the
// Transformer (daemon/kernels/worker_pool.h), which its owner sizes (nielsd: --threads). Nothing
// else starts threads: nielsd loads no libtorch and no BLAS. (Training and tools that use libtorch
// set up its threads with daemon/model/torch/torch_threads.h.)

#include <string>

#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::model {

// Tunes glibc malloc to keep large activation buffers in the heap (no mmap/munmap and page faults
// per call; see threading.cc). Not thread-safe: call once from main or the engine thread before any
// model work.
void ConfigureThreads();

// One line describing the compute setup, e.g. "kernels 2 threads (avx512)"; `pool` is the model's
// pool.
std::string DescribeThreads(const kernels::WorkerPool& pool);

}  // namespace niels::daemon::model
