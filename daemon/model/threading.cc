#include "daemon/model/threading.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <thread>

#include <ATen/Parallel.h>

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

}  // namespace

// Measured with nielsd-bench on the `personal` preset, 2 cores (a shared, busy VM, so figures vary
// run to run; cached decode tokens/s):
//   kBlasThreads, 2 threads   50-78    prefill 830-1000 tokens/s
//   kTorchThreads, 2 threads   4       prefill 89 tokens/s (OpenMP workers spin against OpenBLAS)
//   1 thread                  73       prefill 845 tokens/s
// Decode is a chain of matrix-vector products that OpenBLAS parallelises itself, and the
// element-wise ops between them are far too small to gain from OpenMP, so kBlasThreads is the
// default. It also needs no OMP_WAIT_POLICY=PASSIVE, which libgomp reads from the environment only
// at load time, so a daemon could not set it for itself.
void ConfigureThreads(int n, ThreadSetup setup) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  KeepLargeAllocationsInHeap();
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

std::string DescribeThreads() {
  std::string blas = "unknown BLAS";
  if (auto get = Lookup<GetThreadsFn>("openblas_get_num_threads")) blas = "OpenBLAS " + std::to_string(get());
  if (auto config = Lookup<GetConfigFn>("openblas_get_config")) blas += std::string(" (") + config() + ")";
  return "torch intra-op " + std::to_string(at::get_num_threads()) + ", " + blas;
}

}  // namespace niels::daemon::model
