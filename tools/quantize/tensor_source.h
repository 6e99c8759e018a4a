#pragma once
// TensorSource: what niels-quantize reads -- a model's tensors (GGUF names, shapes, element types
// and data, row by row) and the GGUF metadata its output carries -- so that the quantizer does not
// care where they come from. GgufTensorSource reads an f32/f16/bf16 GGUF file; a Hugging Face or
// niels model directory can become a source too (tools/quantize/README.md, "Other inputs").
//
// Contract of every source: tensor names, shapes and metadata are llama.cpp's (what
// convert_hf_to_gguf.py writes for the architecture: "blk.3.attn_v.weight", dims fastest-varying
// first, every key the loader reads); tensors are f32, f16 or bf16; every tensor's row length
// (dims[0]) is at least 1. Reads are const and may run on several threads at once.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/formats/ggml_type.h"
#include "daemon/formats/gguf_writer.h"

namespace niels::tools::quantize {

namespace formats = ::niels::daemon::formats;

// What the type recipe needs to know about the model: llama.cpp's hparams of the same names.
struct ModelDesc {
  std::string architecture;  // general.architecture: "llama", "qwen2" or "qwen3"
  int64_t layers = 0;        // {arch}.block_count (n_layer)
  int64_t heads = 0;         // {arch}.attention.head_count (n_head)
  int64_t kv_heads = 0;      // {arch}.attention.head_count_kv (n_head_kv; = heads when absent)
};

struct SourceTensor {
  std::string name;             // GGUF name, e.g. "blk.3.attn_v.weight"
  formats::GgmlType type;       // kF32, kF16 or kBF16
  std::vector<int64_t> dims;    // GGUF order: dims[0] is the row length (ggml's ne[0]); 1 to 4 dims
  int64_t elements = 0;         // the product of the dims

  int64_t row_length() const { return dims[0]; }
  int64_t rows() const { return elements / dims[0]; }
};

// One metadata key/value of the output, encoded.
struct MetadataEntry {
  std::string key;
  formats::GgufWriteValue value;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // The file or directory read, for messages.
  virtual std::string Describe() const = 0;
  virtual const ModelDesc& model() const = 0;
  // The output's metadata in order (general.alignment included when it is not the default 32).
  // The quantizer replaces general.file_type and general.quantization_version.
  virtual const std::vector<MetadataEntry>& metadata() const = 0;
  // The tensors in output order.
  virtual const std::vector<SourceTensor>& tensors() const = 0;

  // Elements [first, first + count) of tensor `index` in row-major order (ggml's: dims[0] fastest),
  // widened to float (exact for f16 and bf16) into `out`. A source that reads from disk returns
  // INTERNAL when that fails. REQUIRES: index < tensors().size(), the range inside the tensor.
  virtual common::Status ReadElements(size_t index, int64_t first, int64_t count, float* out) const = 0;
  // The same elements' bytes as stored (the tensor's type) into `out`.
  virtual common::Status ReadRawElements(size_t index, int64_t first, int64_t count, void* out) const = 0;
};

}  // namespace niels::tools::quantize
