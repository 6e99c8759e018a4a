#pragma once
// ConfigureTorchThreads: how libtorch's CPU work uses threads, for the programs that run libtorch
// (training in niels-train, the reference forward in tests and benchmarks). nielsd itself loads no
// libtorch (daemon/kernels/heap_tuning.h).
//
// Two thread pools can run libtorch work: libtorch's OpenMP pool (element-wise ops) and OpenBLAS's
// own pthread pool (the gemms). On a small machine they compete for the same cores, and OpenMP
// workers that busy-wait after a parallel region steal the cores OpenBLAS needs. See
// torch_threads.cc for the measured choice.

namespace niels::torch_model {

// libtorch intra-op threads = 1, OpenBLAS threads = n (n <= 0: the number of cores), OpenBLAS's
// idle spin shortened; also kernels::TuneHeapForActivations(). Not thread-safe: call once from main before any
// libtorch work.
void ConfigureTorchThreads(int n);

}  // namespace niels::torch_model
