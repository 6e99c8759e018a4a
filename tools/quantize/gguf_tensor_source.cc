#include "tools/quantize/gguf_tensor_source.h"

#include <fmt/format.h>

#include <cstring>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"

namespace niels::tools::quantize {

using common::Status;
using common::StatusOr;
using formats::GgmlType;
using formats::GgufFile;

namespace {

Status Invalid(const GgufFile& file, const std::string& what) {
  return Status::InvalidArgument(file.path().string() + ": " + what);
}

// A count key holding one integer >= 1, or (llama.cpp accepts per-layer arrays for head counts) an
// array whose first element is; `fallback` when absent and fallback > 0.
StatusOr<int64_t> CountKey(const GgufFile& file, const std::string& key, int64_t fallback) {
  const formats::GgufKeyValue* kv = file.FindKey(key);
  if (kv == nullptr) {
    if (fallback > 0) return fallback;
    return Invalid(file, fmt::format("key \"{}\" is missing", key));
  }
  int64_t value = 0;
  if (kv->value.type == formats::GgufValueType::kArray) {
    StatusOr<std::vector<int64_t>> values = file.GetIntArray(key, GgufTensorSource::kMaxLayers);  // one per layer
    if (!values.ok()) return Invalid(file, values.status().message());
    value = values->empty() ? 0 : values->front();
  } else {
    StatusOr<int64_t> v = file.GetInt(key);
    if (!v.ok()) return Invalid(file, v.status().message());
    value = *v;
  }
  if (value < 1) return Invalid(file, fmt::format("key \"{}\" is {}, not >= 1", key, value));
  return value;
}

bool IsSplitKey(std::string_view key) {
  return key == "split.no" || key == "split.count" || key == "split.tensors.count";
}

daemon::kernels::Dtype ElementDtype(GgmlType type) {
  switch (type) {
    case GgmlType::kF16: return daemon::kernels::Dtype::kF16;
    case GgmlType::kBF16: return daemon::kernels::Dtype::kBF16;
    default: return daemon::kernels::Dtype::kF32;
  }
}

}  // namespace

StatusOr<std::unique_ptr<GgufTensorSource>> GgufTensorSource::Open(const std::filesystem::path& path) {
  StatusOr<std::shared_ptr<const GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  std::unique_ptr<GgufTensorSource> source(new GgufTensorSource(std::move(*file)));
  NIELS_RETURN_IF_ERROR(source->ReadModel());
  NIELS_RETURN_IF_ERROR(source->ReadTensors());
  return source;
}

Status GgufTensorSource::ReadModel() {
  const GgufFile& f = *file_;
  StatusOr<std::string_view> arch = f.GetString("general.architecture");
  if (!arch.ok()) return Invalid(f, arch.status().message());
  model_.architecture = std::string(*arch);
  if (model_.architecture != "llama" && model_.architecture != "qwen2" && model_.architecture != "qwen3") {
    return Invalid(f, fmt::format("architecture \"{}\" is not supported (llama, qwen2 and qwen3 are)",
                                  model_.architecture));
  }
  const std::string& a = model_.architecture;
  StatusOr<int64_t> layers = CountKey(f, a + ".block_count", 0);
  if (!layers.ok()) return layers.status();
  if (*layers > kMaxLayers) {
    return Invalid(f, fmt::format("key \"{}.block_count\" is {}, more than {}", a, *layers, kMaxLayers));
  }
  model_.layers = *layers;
  StatusOr<int64_t> heads = CountKey(f, a + ".attention.head_count", 0);
  if (!heads.ok()) return heads.status();
  model_.heads = *heads;
  StatusOr<int64_t> kv_heads = CountKey(f, a + ".attention.head_count_kv", model_.heads);
  if (!kv_heads.ok()) return kv_heads.status();
  model_.kv_heads = *kv_heads;
  if (f.FindKey(a + ".expert_count") != nullptr) {
    StatusOr<int64_t> experts = f.GetInt(a + ".expert_count");
    if (!experts.ok()) return Invalid(f, experts.status().message());
    if (*experts > 1) {
      return Invalid(f, fmt::format("a mixture-of-experts model ({}.expert_count = {}) is not supported", a, *experts));
    }
  }
  if (f.FindKey("split.count") != nullptr) {
    StatusOr<int64_t> splits = f.GetInt("split.count");
    if (!splits.ok()) return Invalid(f, splits.status().message());
    if (*splits > 1) {
      return Invalid(f, fmt::format("one shard of a model split into {} files (split.count); merge it first "
                                    "(llama-gguf-split --merge)",
                                    *splits));
    }
  }
  for (const formats::GgufKeyValue& kv : f.metadata()) {
    if (IsSplitKey(kv.key)) continue;
    metadata_.push_back({std::string(kv.key), formats::GgufWriteValue::Copy(f, kv.value)});
  }
  return Status::Ok();
}

Status GgufTensorSource::ReadTensors() {
  const GgufFile& f = *file_;
  if (f.tensors().empty()) return Invalid(f, "the file holds no tensors");
  for (const formats::GgufTensorInfo& info : f.tensors()) {
    const std::string_view type_name = formats::GgmlTypeName(info.type);
    if (info.type != GgmlType::kF32 && info.type != GgmlType::kF16 && info.type != GgmlType::kBF16) {
      const bool block_type = formats::GgmlTypeInfo(info.type).block_size > 1;
      return Invalid(f, fmt::format("tensor \"{}\" is {}: {}", info.name, type_name,
                                    block_type ? "the file is already quantized (niels-quantize reads f32, f16 "
                                                 "and bf16 files)"
                                               : "only f32, f16 and bf16 tensors can be read"));
    }
    if (info.dims[0] < 1) return Invalid(f, fmt::format("tensor \"{}\" has rows of 0 elements", info.name));
    SourceTensor t;
    t.name = std::string(info.name);
    t.type = info.type;
    t.dims.assign(info.dims, info.dims + info.n_dims);
    t.elements = info.elements;
    tensors_.push_back(std::move(t));
    infos_.push_back(&info);
  }
  return Status::Ok();
}

const std::byte* GgufTensorSource::ElementData(size_t index, int64_t first) const {
  return file_->TensorData(*infos_[index]) + first * formats::GgmlTypeInfo(tensors_[index].type).type_size;
}

Status GgufTensorSource::ReadElements(size_t index, int64_t first, int64_t count, float* out) const {
  daemon::kernels::simd::ToFloat(ElementData(index, first), ElementDtype(tensors_[index].type), count, out);
  return Status::Ok();
}

Status GgufTensorSource::ReadRawElements(size_t index, int64_t first, int64_t count, void* out) const {
  const int64_t bytes = count * formats::GgmlTypeInfo(tensors_[index].type).type_size;
  std::memcpy(out, ElementData(index, first), static_cast<size_t>(bytes));
  return Status::Ok();
}

}  // namespace niels::tools::quantize
