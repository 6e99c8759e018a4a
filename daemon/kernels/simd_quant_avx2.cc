// Placeholder until the AVX2 kernels of the block types land: the portable ones.
#include "daemon/kernels/simd_table.h"

namespace niels::daemon::kernels::simd {

#if defined(__x86_64__)
const QuantKernelTable& Avx2QuantTable() { return PortableQuantTable(); }
#endif

}  // namespace niels::daemon::kernels::simd
