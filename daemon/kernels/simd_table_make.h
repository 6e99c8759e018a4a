// This instruction set's KernelTable (simd_table.h) from the kernels of simd_generic.h and
// simd_attention.h: every dtype's instantiation of each. Included only by simd_portable.cc,
// simd_avx2.cc and simd_avx512.cc, INSIDE their anonymous namespace, after those two headers.
// (Narrowing to bf16 is the shared scalar PortableF32ToBF16 in every table: it only runs when
// weights are converted at load.)

#ifndef NIELS_KERNELS_SIMD_GENERIC_INCLUDED_BY_AN_ISA_FILE
#error "simd_table_make.h is included only by simd_portable.cc, simd_avx2.cc and simd_avx512.cc"
#endif

constexpr KernelTable MakeKernelTable(const char* name) {
  return KernelTable{
      name,
      {DotRowsImpl<F32Elements>, DotRowsImpl<F16Elements>, DotRowsImpl<BF16Elements>},
      {AttendImpl<F32Elements>, AttendImpl<F16Elements>, AttendImpl<BF16Elements>},
      {ToFloatImpl<F32Elements>, ToFloatImpl<F16Elements>, ToFloatImpl<BF16Elements>},
      {CopyF32Impl, F32ToF16Impl, PortableF32ToBF16},
      ExpImpl,
      SoftmaxImpl,
      SiluMulImpl,
  };
}
