#include "daemon/loaders/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "daemon/formats/gguf_file.h"
#include "daemon/formats/safetensors.h"
#include "daemon/loaders/gguf_config.h"
#include "daemon/loaders/gguf_tokenizer.h"
#include "daemon/loaders/tensor_import.h"
#include "daemon/loaders/tensor_slots.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/sentencepiece_proto.h"
#include "daemon/text/sentencepiece_tokenizer.h"

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using formats::GgmlType;
using formats::GgufFile;
using formats::GgufTensorInfo;
using formats::ShapeString;
using kernels::Dtype;
using model::ModelConfig;
using model::Weights;


std::optional<Dtype> GgufModelDtype(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return Dtype::kF32;
    case GgmlType::kF16: return Dtype::kF16;
    case GgmlType::kBF16: return Dtype::kBF16;
    case GgmlType::kQ8_0: return Dtype::kQ8_0;
    case GgmlType::kQ4_0: return Dtype::kQ4_0;
    case GgmlType::kQ4_K: return Dtype::kQ4_K;
    case GgmlType::kQ5_K: return Dtype::kQ5_K;
    case GgmlType::kQ6_K: return Dtype::kQ6_K;
    case GgmlType::kQ5_0: return Dtype::kQ5_0;
    default: return std::nullopt;
  }
}

StatusOr<Weights> LoadGgufWeights(const std::shared_ptr<const GgufFile>& file, const ModelConfig& config) {
  const std::string path = file->path().string();
  if (config.layers * kTensorsPerLayer > static_cast<int64_t>(file->tensors().size())) {
    return Status::InvalidArgument(fmt::format("{}: block_count = {}, but the file holds only {} tensors", path,
                                               config.layers, file->tensors().size()));
  }
  Weights w;
  w.backing.push_back(file);
  std::set<std::string_view> used;
  for (TensorSlot& slot : FamilyTensorSlots(config, TensorNaming::kGguf, &w)) {
    const GgufTensorInfo* info = file->FindTensor(slot.name);
    if (info == nullptr) {
      return Status::InvalidArgument(fmt::format("{}: missing tensor {} {} ({} model)", path, slot.name,
                                                 ShapeString(slot.shape), model::ArchitectureName(config.architecture)));
    }
    const std::string where = path + ": tensor " + slot.name;
    const std::optional<Dtype> dtype = GgufModelDtype(info->type);
    if (!dtype) {
      return Status::InvalidArgument(fmt::format(
          "{} has type {}, which nielsd cannot compute with (supported: f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q5_K, q6_K)",
          where, formats::GgmlTypeName(info->type)));
    }
    if (info->Shape() != slot.shape) {
      return Status::InvalidArgument(
          fmt::format("{} has shape {}, expected {}", where, ShapeString(info->Shape()), ShapeString(slot.shape)));
    }
    auto tensor = ImportTensor(file->TensorData(*info), *dtype, slot.shape, slot.matrix, where, w.backing);
    if (!tensor.ok()) return tensor.status();
    *slot.slot = std::move(tensor).value();
    used.insert(info->name);
  }
  for (const GgufTensorInfo& info : file->tensors()) {
    if (!used.count(info.name)) {
      return Status::InvalidArgument(fmt::format("{}: unexpected tensor {} {} (not part of a {} model with these "
                                                 "settings)",
                                                 path, info.name, ShapeString(info.Shape()),
                                                 model::ArchitectureName(config.architecture)));
    }
  }
  if (config.tied_embeddings) w.lm_head = w.tok_emb;
  return w;
}

// The llama3 scaling factor a rope_freqs tensor implies (its largest divisor; for display: the
// forward uses the tensor). INVALID_ARGUMENT naming the element that is not a divisor in (0, 1e6).
StatusOr<double> Llama3Factor(const model::Tensor& rope_freqs, const std::filesystem::path& path) {
  const float* f = rope_freqs.f32();
  double largest = 1.0;
  for (int64_t i = 0; i < rope_freqs.numel(); ++i) {
    if (!(f[i] > 0.0f && f[i] < 1e6f)) {
      return Status::InvalidArgument(fmt::format(
          "{}: tensor rope_freqs.weight[{}] = {} is not a frequency divisor in (0, 1e6)", path.string(), i, f[i]));
    }
    largest = std::max(largest, static_cast<double>(f[i]));
  }
  return largest;
}

// The tokenizer of `data` and what goes with it (chat template, BOS rule, niels_gpt's markers).
Status AttachTokenizer(const std::filesystem::path& path, GgufTokenizer data, Model* model) {
  const text::SpecialTokenIds special = data.special;
  if (data.sentencepiece) {
    auto tokenizer = text::SentencePieceTokenizer::FromModelProto(text::SerializeBpeModelProto(*data.sentencepiece),
                                                                  path.string() + ": tokenizer");
    if (!tokenizer.ok()) return tokenizer.status();
    if ((*tokenizer)->special().sys >= 0) {
      // niels_gpt's vocabulary (niels-export): its token-native chat format, as from its niels
      // directory; the file's tokenizer.chat_template is that format written as Jinja for llama.cpp.
      model->special = (*tokenizer)->special();
      model->tokenizer = std::move(tokenizer).value();
      return Status::Ok();
    }
    model->chat_template = std::move(data.chat_template);
    model->tokenizer = std::move(tokenizer).value();
  } else {
    auto tokenizer = text::BpeTokenizer::Create(std::move(*data.bpe));
    if (!tokenizer.ok()) {
      return Status::InvalidArgument(fmt::format("{}: tokenizer: {}", path.string(), tokenizer.status().message()));
    }
    model->chat_template = (*tokenizer)->chat_template();
    model->tokenizer = std::move(tokenizer).value();
  }
  if (special.bos) model->bos_token = model->tokenizer->Piece(*special.bos);
  if (special.eos) model->eos_token = model->tokenizer->Piece(*special.eos);
  model->bos_id = special.bos;
  if (special.add_bos && special.bos) model->add_bos_id = special.bos;
  return Status::Ok();
}

}  // namespace

bool IsGgufFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

StatusOr<std::unique_ptr<Model>> LoadGgufModel(const std::filesystem::path& path,
                                               std::shared_ptr<kernels::WorkerPool> pool, const LoadOptions& options) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto config = GgufModelConfig(**file);
  if (!config.ok()) return config.status();
  auto tokenizer_data = ReadGgufTokenizer(**file, config->vocab_size);
  if (!tokenizer_data.ok()) return tokenizer_data.status();
  auto weights = LoadGgufWeights(*file, *config);
  if (!weights.ok()) return weights.status();

  auto model = std::make_unique<Model>();
  model->dir = path;
  model->format = ModelFormat::kGguf;
  model->config = *config;
  if (model->config.name.empty()) model->config.name = path.stem().string();
  if (weights->rope_freqs.defined()) {
    auto factor = Llama3Factor(weights->rope_freqs, path);
    if (!factor.ok()) return factor.status();
    model->config.rope_scaling.factor = *factor;
  }
  model->stop_ids = tokenizer_data->stop_ids;
  NIELS_RETURN_IF_ERROR(AttachTokenizer(path, std::move(tokenizer_data).value(), model.get()));
  if (model->special.sys >= 0 && model->config.qk_rows_interleaved) {
    // niels-export's GGUF of a niels_gpt model: its q/k rows are niels_gpt's, whose RoPE rotates
    // adjacent pairs (llama.cpp's normal RoPE on the stored rows). Rotating them so is the same math
    // as putting each head in halves order and rotating halves, and bitwise what its niels
    // directory computes.
    model->config.rope_pairs = model::RopePairs::kAdjacent;
    model->config.qk_rows_interleaved = false;
  }
  model->weights_file =
      std::make_shared<formats::MappedFileSet>(std::vector<std::shared_ptr<const formats::MappedFile>>{*file});
  NIELS_RETURN_IF_ERROR(BuildTransformer(model.get(), std::move(weights).value(), std::move(pool), options,
                                         path.string()));
  return model;
}

}  // namespace niels::daemon::loaders
