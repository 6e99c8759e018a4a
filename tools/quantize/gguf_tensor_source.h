#pragma once
// GgufTensorSource: a TensorSource over an f32/f16/bf16 GGUF file of the llama, qwen2 or qwen3
// architecture, as llama.cpp's convert_hf_to_gguf.py (or niels-export) writes it. The file is
// memory-mapped (daemon/formats/gguf_file.h): elements are read straight from the mapping, so a
// quantizer holds one slab of them in memory at a time, not the model.
//
// Immutable after Open(); ReadElements/ReadRawElements may run on several threads at once.

#include <filesystem>
#include <memory>
#include <vector>

#include "common/status.h"
#include "daemon/formats/gguf_file.h"
#include "tools/quantize/tensor_source.h"

namespace niels::tools::quantize {

class GgufTensorSource : public TensorSource {
 public:
  // Largest block_count accepted (llama.cpp's LLAMA_MAX_LAYERS).
  static constexpr int64_t kMaxLayers = 512;

  // Opens `path`. Errors (the message names the file and what is wrong):
  //   NOT_FOUND         the file cannot be opened;
  //   INVALID_ARGUMENT  not a valid GGUF file (GgufFile::Open's message: magic, truncation, ...);
  //                     general.architecture missing or not llama/qwen2/qwen3; {arch}.block_count
  //                     missing or not in [1, kMaxLayers]; head counts missing or not >= 1; a
  //                     mixture-of-experts model ({arch}.expert_count > 1); one shard of a split
  //                     model (split.count > 1); a tensor already quantized or of a type other
  //                     than f32, f16, bf16 (named, with its type); no tensors.
  static common::StatusOr<std::unique_ptr<GgufTensorSource>> Open(const std::filesystem::path& path);

  std::string Describe() const override { return file_->path().string(); }
  const ModelDesc& model() const override { return model_; }
  // Every key/value of the file in file order, as encoded there, except split.no, split.count and
  // split.tensors.count (as llama.cpp's quantizer drops them).
  const std::vector<MetadataEntry>& metadata() const override { return metadata_; }
  // In file order.
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  common::Status ReadElements(size_t index, int64_t first, int64_t count, float* out) const override;
  common::Status ReadRawElements(size_t index, int64_t first, int64_t count, void* out) const override;

 private:
  explicit GgufTensorSource(std::shared_ptr<const formats::GgufFile> file) : file_(std::move(file)) {}
  common::Status ReadModel();
  common::Status ReadTensors();
  // Element `first` of tensor `index` in the mapping.
  const std::byte* ElementData(size_t index, int64_t first) const;

  std::shared_ptr<const formats::GgufFile> file_;
  ModelDesc model_;
  std::vector<MetadataEntry> metadata_;
  std::vector<SourceTensor> tensors_;
  std::vector<const formats::GgufTensorInfo*> infos_;  // tensors_[i]'s info in file_
};

}  // namespace niels::tools::quantize
