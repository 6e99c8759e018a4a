#include "daemon/kernels/simd_kernels.h"

#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_table.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace niels::daemon::kernels::simd {
namespace {

#if defined(__x86_64__)
// F16C (CPUID leaf 1, ECX bit 29): asked of CPUID directly, since clang's __builtin_cpu_supports
// does not know the name.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool CanRun(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();  // needed when this runs as a static initializer, before main
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  switch (isa) {
    case Isa::kPortable: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == Isa::kPortable;
#endif
}

const KernelTable& TableOf(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return Avx512Table();
  if (isa == Isa::kAvx2) return Avx2Table();
#endif
  return PortableTable();
}

Isa Detect() {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (CanRun(isa)) return isa;
  }
  return Isa::kPortable;
}

const Isa kDetected = Detect();
const KernelTable* active = &TableOf(kDetected);  // or another while a test forces it

int Index(Dtype dtype) { return static_cast<int>(dtype); }

}  // namespace

void DotRows(Matrix w, int64_t in, const float* x, int64_t x_stride, int64_t rows, const float* bias, float* y,
             int64_t y_stride, int64_t o_begin, int64_t o_end, int64_t w_rows) {
  if (rows <= 0 || o_begin >= o_end) return;
  const int64_t prefetch_end = w_rows > o_end ? w_rows : o_end;
  active->dot_rows[Index(w.dtype)]({w.data, in, x, x_stride, rows, bias, y, y_stride, prefetch_end}, o_begin, o_end);
}

void Attend(const AttendArgs& args, Dtype kv_dtype) { active->attend[Index(kv_dtype)](args); }

void ToFloat(const void* src, Dtype dtype, int64_t n, float* dst) {
  if (IsQuantized(dtype)) {
    DequantizeBlocks(dtype, src, n / DtypeBlockElements(dtype), dst);
  } else {
    active->to_float[Index(dtype)](src, n, dst);
  }
}

void FromFloat(const float* src, int64_t n, Dtype dtype, void* dst) {
  if (IsQuantized(dtype)) {
    QuantizeBlocks(dtype, src, n, dst);
  } else {
    active->from_float[Index(dtype)](src, n, dst);
  }
}

void Exp(const float* x, int64_t n, float* out) { active->exp(x, n, out); }

void Softmax(float* s, int64_t m, float scale) { active->softmax(s, m, scale); }

void SiluMul(const float* g, float* a, int64_t n) { active->silu_mul(g, a, n); }

const char* Name() { return active->name; }

Isa Detected() { return kDetected; }

bool ForceIsaForTesting(Isa isa) {
  if (!CanRun(isa)) return false;
  active = &TableOf(isa);
  return true;
}

}  // namespace niels::daemon::kernels::simd
