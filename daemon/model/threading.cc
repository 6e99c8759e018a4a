#include "daemon/model/threading.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/worker_pool.h"

namespace niels::daemon::model {
namespace {

// OpenBLAS is reached through libblas.so.3 (Debian alternatives), so its extensions are looked up at
// run time; with another BLAS behind libblas.so.3 they are simply absent.
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();
using GetConfigFn = char* (*)();

template <typename Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

void SetBlasThreads(int n) {
  if (auto set = Lookup<SetThreadsFn>("openblas_set_num_threads")) set(n);
}

// Activations of a prefill or uncached forward (attention scores [H, n, n], MLP [n, d_ff]) are
// megabytes each. With glibc's defaults they are mmap'd and unmapped, or trimmed from the heap top,
// on every op, and the page faults cost more than the arithmetic: prefill ran ~3x slower in
// nielsd-bench. Keep such blocks in the heap and keep freed memory for reuse instead.
void KeepLargeAllocationsInHeap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// After a gemm, OpenBLAS's worker threads busy-wait for the next one for 2^28 cycles (~0.1 s)
// before they sleep. After a prefill that is the first ~50 tokens of the reply, and the spinning
// worker takes a core from the decode WorkerPool: cached decode ran at 460-470 instead of 560-630
// tokens/s in nielsd-bench (personal preset, 2 threads, runs alternated). 2^18 cycles (~0.1 ms)
// still covers the gaps between the gemms of one prefill (prefill speed unchanged).
// OpenBLAS reads OPENBLAS_THREAD_TIMEOUT (log2 of the cycles) in its library constructor, before
// main, and applies it when it starts its threads. So: set the variable, have OpenBLAS read its
// environment again and restart its threads, through three functions libopenblas exports. Runs
// once per process, from ConfigureThreads, before any model work. A value the user set is kept.
void ShortenBlasSpinWait() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto read_env = Lookup<void (*)()>("openblas_read_env");
    const auto stop_threads = Lookup<int (*)()>("blas_thread_shutdown_");
    const auto start_threads = Lookup<int (*)()>("blas_thread_init");
    if (read_env == nullptr || stop_threads == nullptr || start_threads == nullptr) return;
    if (getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;
    setenv("OPENBLAS_THREAD_TIMEOUT", "18", /*overwrite=*/0);
    read_env();
    stop_threads();
    start_threads();
  });
}

}  // namespace

// Measured with nielsd-bench on the `personal` preset, 2 cores (a shared VM running other builds,
// load average 7-13, so single runs vary by 2x; cached decode tokens/s, prefill tokens/s), when
// decode still ran on libtorch ops and OpenBLAS:
//   kBlasThreads, 2 threads     decode 47-118   prefill 740-1000
//   kTorchThreads, 2 threads    decode 4        prefill 89   (OpenMP workers spin against OpenBLAS)
//   1 thread                    decode 73-98    prefill 845-1115
// So torch intra-op threads stay at 1 (the element-wise ops between products are too small to gain
// from OpenMP, and its spinning workers are what collapsed kTorchThreads), and OpenBLAS gets the n
// threads for the gemms of prefill and the uncached forward. This also needs no
// OMP_WAIT_POLICY=PASSIVE, which libgomp reads from the environment only at load time.
// Decode now runs on its own kernels (daemon/kernels/decode_step.h) over a WorkerPool of n threads:
// 2 threads vs 1 is 1.3 vs 2.7 ms per token for the weight reads alone (2.1x), measured side by
// side.
void ConfigureThreads(int n, ThreadSetup setup) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  KeepLargeAllocationsInHeap();
  ShortenBlasSpinWait();
  switch (setup) {
    case ThreadSetup::kBlasThreads:
      at::set_num_threads(1);
      SetBlasThreads(n);
      break;
    case ThreadSetup::kTorchThreads:
      at::set_num_threads(n);
      SetBlasThreads(n);
      break;
  }
}

std::string DescribeThreads(const kernels::WorkerPool& pool) {
  std::string blas = "unknown BLAS";
  if (auto get = Lookup<GetThreadsFn>("openblas_get_num_threads")) blas = "OpenBLAS " + std::to_string(get());
  if (auto config = Lookup<GetConfigFn>("openblas_get_config")) blas += std::string(" (") + config() + ")";
  return "torch intra-op " + std::to_string(at::get_num_threads()) + ", " + blas + ", matvec " +
         std::to_string(pool.threads()) + " (" + kernels::MatVecKernelName() + ")";
}

}  // namespace niels::daemon::model
