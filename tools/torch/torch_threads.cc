#include "tools/torch/torch_threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>

#include "daemon/kernels/heap_tuning.h"

namespace niels::torch_model {
namespace {

// OpenBLAS is reached through libblas.so.3 (Debian alternatives), so its extensions are looked up at
// run time; with another BLAS behind libblas.so.3 they are simply absent.
template <typename Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

// After a gemm, OpenBLAS's worker threads busy-wait for the next one for 2^28 cycles (~0.1 s)
// before they sleep, taking a core from whatever runs next (measured when nielsd's decode still
// shared the process with OpenBLAS: 460-470 instead of 560-630 tokens/s). 2^18 cycles (~0.1 ms)
// still covers the gaps between the gemms of one forward. OpenBLAS reads OPENBLAS_THREAD_TIMEOUT
// (log2 of the cycles) in its library constructor, before main, and applies it when it starts its
// threads. So: set the variable, have OpenBLAS read its environment again and restart its threads,
// through three functions libopenblas exports. A value the user set is kept.
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

// Measured with nielsd-bench on the `personal` preset, 2 cores, when prefill and decode still ran on
// libtorch (a shared VM, runs vary by 2x; decode, prefill tokens/s):
//   torch intra-op 1, OpenBLAS 2    decode 47-118   prefill 740-1000
//   torch intra-op 2, OpenBLAS 2    decode 4        prefill 89   (OpenMP workers spin against OpenBLAS)
// So torch intra-op threads stay at 1 (the element-wise ops between products are too small to gain
// from OpenMP, and its spinning workers are what collapsed the second setup) and OpenBLAS gets the
// n threads for the gemms.
void ConfigureTorchThreads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  daemon::kernels::TuneHeapForActivations();
  ShortenBlasSpinWait();
  at::set_num_threads(1);
  if (auto set = Lookup<void (*)(int)>("openblas_set_num_threads")) set(n);
}

}  // namespace niels::torch_model
