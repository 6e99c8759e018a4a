#include "daemon/loaders/tensor_import.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "daemon/kernels/simd_kernels.h"

namespace niels::daemon::loaders {

std::optional<kernels::Dtype> ModelDtype(formats::SafetensorsDtype d) {
  switch (d) {
    case formats::SafetensorsDtype::kF32: return kernels::Dtype::kF32;
    case formats::SafetensorsDtype::kF16: return kernels::Dtype::kF16;
    case formats::SafetensorsDtype::kBF16: return kernels::Dtype::kBF16;
    default: return std::nullopt;
  }
}

using common::Status;
using common::StatusOr;
using kernels::Dtype;
using model::Tensor;

void* NewTensorBuffer(int64_t bytes, std::vector<std::shared_ptr<const void>>& backing) {
  std::shared_ptr<std::byte[]> buffer(new std::byte[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
  void* data = buffer.get();
  backing.push_back(std::shared_ptr<const void>(std::move(buffer), data));
  return data;
}

StatusOr<Tensor> ConvertedTensor(const void* source, Dtype source_dtype, const std::vector<int64_t>& shape,
                                 Dtype dtype, const std::string& where,
                                 std::vector<std::shared_ptr<const void>>& backing) {
  const Tensor in{source, source_dtype, shape};
  Tensor out{nullptr, dtype, shape};
  const int64_t n = out.numel();
  std::vector<float> floats(static_cast<size_t>(n));
  if (n > 0) {
    // Through an aligned copy: the source may sit at any byte offset of the file.
    std::vector<std::byte> aligned(static_cast<size_t>(in.bytes()));
    std::memcpy(aligned.data(), source, aligned.size());
    kernels::simd::ToFloat(aligned.data(), source_dtype, n, floats.data());
  }
  void* data = NewTensorBuffer(out.bytes(), backing);
  kernels::simd::FromFloat(floats.data(), n, dtype, data);
  out.data = data;
  if (dtype == Dtype::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(floats[i]) && !std::isfinite(kernels::ElementToFloat(data, dtype, i))) {
        return Status::InvalidArgument(fmt::format(
            "{} has a value ({}) beyond f16's range (65504); keep it in f32 or bf16", where, floats[i]));
      }
    }
  }
  return out;
}

StatusOr<Tensor> ImportTensor(const std::byte* data, Dtype stored, const std::vector<int64_t>& shape, bool matrix,
                              const std::string& where, std::vector<std::shared_ptr<const void>>& backing) {
  if (!matrix && kernels::IsQuantized(stored)) {
    return Status::InvalidArgument(fmt::format("{} is stored as {}; a 1-D tensor must be f32, f16 or bf16", where,
                                               kernels::DtypeName(stored)));
  }
  const Dtype wanted = matrix ? stored : Dtype::kF32;
  const int64_t alignment = kernels::IsQuantized(stored) ? 1 : kernels::DtypeSize(stored);
  if (stored == wanted && reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(alignment) == 0) {
    return Tensor{data, stored, shape};
  }
  return ConvertedTensor(data, stored, shape, wanted, where, backing);
}

}  // namespace niels::daemon::loaders
