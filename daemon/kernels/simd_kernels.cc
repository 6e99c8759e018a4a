#include "daemon/kernels/simd_kernels.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/kernels/quant_activations.h"
#include "daemon/kernels/quant_blocks.h"
#include "daemon/kernels/simd_table.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

#if defined(__x86_64__)
// AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), the OS saving the tile state (XCR0
// bits 17 and 18), and Linux's grant of the tile data to this process (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; process-wide, asked once). False when any is missing or
// refused: the AVX-512 VNNI kernels run instead.
bool AmxGranted() {
  static const bool granted = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return granted;
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

// The block-type kernels of an instruction set: AVX-512's need VNNI besides (VPDPBUSD), and use
// AMX-INT8's tiles for prefill where granted; an AVX-512 CPU without VNNI runs the AVX2 ones.
bool amx_allowed = true;  // false while a test turns AMX off

const QuantKernelTable& QuantTableOf(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (isa == Isa::kAvx512 && __builtin_cpu_supports("avx512vnni")) {
    return amx_allowed && AmxGranted() ? Avx512AmxQuantTable() : Avx512VnniQuantTable();
  }
  if (isa == Isa::kAvx512 || isa == Isa::kAvx2) return Avx2QuantTable();
#endif
  return PortableQuantTable();
}

const Isa kDetected = Detect();
Isa active_isa = kDetected;
const KernelTable* active = &TableOf(kDetected);  // or another while a test forces it
const QuantKernelTable* active_quant = &QuantTableOf(kDetected);

int Index(Dtype dtype) { return static_cast<int>(dtype); }
int QuantIndex(Dtype dtype) { return static_cast<int>(dtype) - static_cast<int>(Dtype::kQ8_0); }

// At least `bytes` bytes of `buffer`, 64-byte aligned: grown when more is asked for, never shrunk
// (so a steady stream of products allocates nothing).
void* Aligned64(std::vector<unsigned char>& buffer, int64_t bytes) {
  if (static_cast<int64_t>(buffer.size()) < bytes + 64) buffer.resize(static_cast<size_t>(bytes + 64));
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64);
}

// The calling thread's buffer for the activations of a quantized product (apart from
// ScratchBuffer's, which the kernels use while these activations are read).
void* ActivationBuffer(int64_t bytes) {
  thread_local std::vector<unsigned char> buffer;
  return Aligned64(buffer, bytes);
}

}  // namespace

void* ScratchBuffer(int64_t bytes) {
  thread_local std::vector<unsigned char> buffer;
  return Aligned64(buffer, bytes);
}

void DotRows(Matrix w, int64_t in, const float* x, int64_t x_stride, int64_t rows, const float* bias, float* y,
             int64_t y_stride, int64_t o_begin, int64_t o_end, int64_t w_rows) {
  if (rows <= 0 || o_begin >= o_end) return;
  if (IsQuantized(w.dtype)) {
    void* xq = ActivationBuffer(rows * ActivationLayoutFor(w.dtype, in).row_bytes);
    QuantizeActivations(w.dtype, x, x_stride, rows, in, xq);
    DotRowsQuantized(w, in, xq, rows, bias, y, y_stride, o_begin, o_end, w_rows);
    return;
  }
  const int64_t prefetch_end = w_rows > o_end ? w_rows : o_end;
  active->dot_rows[Index(w.dtype)]({w.data, in, x, x_stride, rows, bias, y, y_stride, prefetch_end}, o_begin, o_end);
}

void QuantizeActivations(Dtype weight, const float* x, int64_t x_stride, int64_t rows, int64_t in, void* out) {
  const ActivationLayout l = ActivationLayoutFor(weight, in);
  const QuantizeActsArgs args{l.in, l.block, l.padded, l.bias, l.d_offset, l.sums_offset, l.starts_offset, l.row_bytes};
  active_quant->quantize(args, x, x_stride, rows, out);
}

void DotRowsQuantized(Matrix w, int64_t in, const void* xq, int64_t rows, const float* bias, float* y,
                      int64_t y_stride, int64_t o_begin, int64_t o_end, int64_t w_rows) {
  if (rows <= 0 || o_begin >= o_end) return;
  const ActivationLayout layout = ActivationLayoutFor(w.dtype, in);
  const int64_t prefetch_end = w_rows > o_end ? w_rows : o_end;
  const QuantDotArgs args{w.data,           in,           RowBytes(w.dtype, in), xq,   layout.row_bytes,
                          layout.d_offset, layout.sums_offset, layout.starts_offset, rows, bias,
                          y,                y_stride,     prefetch_end};
  active_quant->dot[QuantIndex(w.dtype)](args, o_begin, o_end);
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

const char* QuantName() { return active_quant->name; }

Isa Detected() { return kDetected; }

bool ForceIsaForTesting(Isa isa) {
  if (!CanRun(isa)) return false;
  active_isa = isa;
  active = &TableOf(isa);
  active_quant = &QuantTableOf(isa);
  return true;
}

bool UseAmxForTesting(bool enabled) {
  amx_allowed = enabled;
  active_quant = &QuantTableOf(active_isa);
  // By name: Avx512AmxQuantTable() itself is AVX-512 code, which a CPU without it cannot even call.
  return std::strcmp(active_quant->name, "avx512-amx") == 0;
}

}  // namespace niels::daemon::kernels::simd
