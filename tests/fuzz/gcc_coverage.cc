// Coverage for libFuzzer in g++ fuzz builds (build-fuzz-gcc; tests/fuzz/README.md says why the
// libtorch-linked targets are built with g++): g++ has no -fsanitize=fuzzer, but it can call
// __sanitizer_cov_trace_pc() at the start of every basic block (-fsanitize-coverage=trace-pc) and
// the comparison hooks libFuzzer implements (trace-cmp). libFuzzer 14's own __sanitizer_cov_trace_pc
// only aborts ("no longer supported"), so the build links a copy of the libFuzzer archive in which
// that symbol is weak, and this definition counts each block in an array of 8-bit counters (indexed
// by a hash of the block's address) registered with libFuzzer as an instrumented module: libFuzzer
// then sees block coverage with hit counts, as it does for clang's inline 8-bit counters.
//
// Compiled without sanitizers and coverage (it runs inside every instrumented block).
#include <cstddef>
#include <cstdint>

extern "C" void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);

namespace {

constexpr size_t kCounters = size_t{1} << 17;  // libFuzzer scans them all after every run
alignas(64) uint8_t g_counters[kCounters];

__attribute__((constructor)) void RegisterCounters() {
  __sanitizer_cov_8bit_counters_init(g_counters, g_counters + kCounters);
}

}  // namespace

extern "C" void __sanitizer_cov_trace_pc() {
  const auto pc = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  g_counters[(pc * 0x9E3779B97F4A7C15ull) >> (64 - 17)]++;  // Fibonacci hash to 17 bits
}

// g++'s trace-cmp also reports floating-point comparisons, which libFuzzer has no hooks for.
extern "C" void __sanitizer_cov_trace_cmpf(float, float) {}
extern "C" void __sanitizer_cov_trace_cmpd(double, double) {}
