#pragma once
// Quantize(): writes the quantized GGUF file of a TensorSource, as llama.cpp's llama-quantize
// would for the file type (quant_recipe.h), streaming tensor by tensor.
//
// The output holds the source's metadata in order with general.file_type set to llama.cpp's value
// for the type and general.quantization_version to 2 (each replaced where it is, appended when
// absent), then the tensors in the source's order, each of its recipe type: quantized from the
// values widened to float, or copied byte for byte when the type does not change. Layout as
// GgufWriter's (GGUF v3, every tensor at a multiple of general.alignment, default 32).
//
// Memory: one slab of `slab_elements` values (as float, plus its encoding) at a time, whatever the
// model's size. The file appears at its path only when complete (OutputFile): on any error the
// path is left as it was.
// Thread-safety: the caller's thread and options.threads - 1 workers encode each slab; the source
// is read from all of them.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/formats/ggml_type.h"
#include "tools/quantize/quant_recipe.h"
#include "tools/quantize/tensor_source.h"

namespace niels::tools::quantize {

// GGML_QNT_VERSION: the version of the block formats, which llama.cpp writes to every quantized file.
inline constexpr uint32_t kQuantizationVersion = 2;

// What happened to one tensor.
struct TensorReport {
  size_t index = 0;  // in the source's order
  size_t count = 0;  // tensors in all
  std::string name;
  formats::GgmlType from = formats::GgmlType::kF32;
  formats::GgmlType to = formats::GgmlType::kF32;
  int64_t elements = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

struct QuantizeOptions {
  FileType type = FileType::kQ8_0;
  // Threads encoding each slab, the caller's included; >= 1. Default 1.
  int threads = 1;
  // Values per slab (rounded down to whole 256-value blocks, at least one block). Default 4 Mi
  // (16 MiB as float).
  int64_t slab_elements = int64_t{4} << 20;
  // Called after each tensor is written, from the caller's thread; may be empty.
  std::function<void(const TensorReport&)> on_tensor;
};

struct QuantizeResult {
  std::vector<formats::GgmlType> types;  // each tensor's output type, in the source's order
  uint64_t bytes_in = 0;                 // tensor data read
  uint64_t bytes_out = 0;                // tensor data written
  uint64_t file_size = 0;
};

// Writes the quantized file to `out`. Errors (the message names the tensor and, for values, the
// row and column; nothing is left at `out`):
//   INVALID_ARGUMENT  the recipe refuses the model (quant_recipe.h); a value that is not finite or
//                     too large to quantize; a block whose f16 scale overflows (as llama.cpp, which
//                     refuses such blocks); bad options; `out`'s directory missing;
//   INTERNAL          reading the source or writing the file failed.
common::StatusOr<QuantizeResult> Quantize(const TensorSource& source, const std::filesystem::path& out,
                                          const QuantizeOptions& options);

}  // namespace niels::tools::quantize
