#pragma once
// Turning a tensor stored in a mapped model file into a model::Tensor: a view of the mapping
// wherever the bytes can be used as they are, a converted copy otherwise. Shared by the loaders.
// Safe from any thread (each call writes only the `backing` it is given).

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/formats/safetensors.h"
#include "daemon/kernels/dtype.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

// The dtype a safetensors tensor is used in (f32, f16, bf16); nullopt for any other.
std::optional<kernels::Dtype> ModelDtype(formats::SafetensorsDtype d);

// The tensor of `shape` whose `stored` bytes start at `data` (any address), as the model keeps it:
// a matrix (matrix = true) in its stored dtype -- a view of `data` when an element type sits at a
// multiple of its size (a block type at any address: the kernels read blocks bytewise), else an
// aligned copy; a norm, bias or other 1-D tensor as f32 (a view when stored f32 and aligned, else
// widened into a buffer `backing` keeps). INVALID_ARGUMENT naming `where` for a 1-D tensor of a
// block type.
common::StatusOr<model::Tensor> ImportTensor(const std::byte* data, kernels::Dtype stored,
                                             const std::vector<int64_t>& shape, bool matrix,
                                             const std::string& where,
                                             std::vector<std::shared_ptr<const void>>& backing);

// `source` (any dtype, any alignment; rows of shape.back() elements) as a new tensor of `dtype`
// in a buffer `backing` keeps, via float. A finite value that becomes infinite (beyond f16's
// range) is refused, naming `where`. REQUIRES: dtype is f32, f16 or bf16.
common::StatusOr<model::Tensor> ConvertedTensor(const void* source, kernels::Dtype source_dtype,
                                                const std::vector<int64_t>& shape, kernels::Dtype dtype,
                                                const std::string& where,
                                                std::vector<std::shared_ptr<const void>>& backing);

// An owned, uninitialized buffer of `bytes` bytes (at least 1), kept alive by `backing`.
void* NewTensorBuffer(int64_t bytes, std::vector<std::shared_ptr<const void>>& backing);

}  // namespace niels::daemon::loaders
