#include "daemon/loaders/niels_dir.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/formats/safetensors.h"
#include "daemon/loaders/tensor_import.h"

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using formats::SafetensorsDtype;
using formats::SafetensorsFile;
using formats::SafetensorsTensorInfo;
using formats::ShapeString;
using kernels::Dtype;
using model::ModelConfig;
using model::Tensor;
using model::Weights;

constexpr std::string_view kLmHead = "lm_head.weight";

// niels_gpt's name -> the slot of Weights it fills, in the state_dict order (tensor_slots.h's
// table).
template <typename W, typename F>
void VisitNielsTensors(W& w, F&& f) {
  for (const auto& [ours, niels] : NielsTensorNames(static_cast<int64_t>(w.blocks.size()))) f(niels, *FindSlot(w, ours));
}

// The shape every stored tensor must have under `c`, by niels_gpt's name.
std::map<std::string, std::vector<int64_t>> NielsShapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> ours;
  for (auto& [name, shape] : model::ExpectedShapes(c, /*fused_qkv=*/true)) ours[name] = std::move(shape);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [our_name, niels] : NielsTensorNames(c.layers)) shapes[niels] = ours.at(our_name);
  return shapes;
}

// niels_gpt's matrices (kept in the model's dtype; the rest is f32).
bool IsNielsMatrix(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name == "tok_emb.weight" || name == kLmHead || ends_with("attn.qkv.weight") ||
         ends_with("attn.proj.weight") || ends_with("fc_a.weight") || ends_with("fc_g.weight") ||
         ends_with("fc_out.weight");
}

std::optional<SafetensorsDtype> FileDtype(Dtype d) {
  switch (d) {
    case Dtype::kF32: return SafetensorsDtype::kF32;
    case Dtype::kF16: return SafetensorsDtype::kF16;
    case Dtype::kBF16: return SafetensorsDtype::kBF16;
    default: return std::nullopt;
  }
}

// Checks names, dtypes and shapes of every stored tensor against `config` (lm_head.weight may be
// present with the tok_emb shape): one dtype, F32, F16 or BF16, for all of them.
Status CheckTensors(const SafetensorsFile& file, const ModelConfig& config) {
  const std::string name = file.path().string();
  auto expected = NielsShapes(config);
  expected[std::string(kLmHead)] = {config.vocab_size, config.width};
  for (const auto& info : file.tensors()) {
    auto it = expected.find(info.name);
    if (it == expected.end()) {
      return Status::InvalidArgument(name + ": unexpected tensor " + info.name + " " +
                                     ShapeString(info.shape) + " (not part of a niels_gpt model with L = " +
                                     std::to_string(config.layers) + ")");
    }
    if (!ModelDtype(info.dtype)) {
      return Status::InvalidArgument(name + ": tensor " + info.name + " has dtype " +
                                     std::string(SafetensorsDtypeName(info.dtype)) + ", expected F32, F16 or BF16");
    }
    if (info.shape != it->second) {
      std::string msg = name + ": tensor " + info.name + " has shape " + ShapeString(info.shape) +
                        ", expected " + ShapeString(it->second);
      if (info.name == "tok_emb.weight" || info.name == kLmHead) {
        msg += " (config V = " + std::to_string(config.vocab_size) + ", C = " + std::to_string(config.width) + ")";
      }
      return Status::InvalidArgument(msg);
    }
  }
  expected.erase(std::string(kLmHead));
  std::vector<std::string> missing;
  for (const auto& [tensor, shape] : expected) {
    if (file.Find(tensor) == nullptr) missing.push_back(tensor + " " + ShapeString(shape));
  }
  if (!missing.empty()) {
    std::string msg = name + ": missing tensor" + (missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < missing.size() && i < 8; ++i) {
      if (i > 0) msg += ", ";
      msg += missing[i];
    }
    if (missing.size() > 8) msg += ", ... (" + std::to_string(missing.size()) + " in all)";
    return Status::InvalidArgument(msg);
  }
  // One dtype for all: the model's is tok_emb.weight's.
  const SafetensorsTensorInfo& tok_emb = *file.Find("tok_emb.weight");
  for (const auto& info : file.tensors()) {
    if (info.dtype != tok_emb.dtype) {
      return Status::InvalidArgument(fmt::format(
          "{}: tensor {} has dtype {} but tok_emb.weight has {}: a model file holds all its tensors in one dtype "
          "(niels-convert --dtype writes f32, f16 or bf16)",
          name, info.name, SafetensorsDtypeName(info.dtype), SafetensorsDtypeName(tok_emb.dtype)));
    }
  }
  return Status::Ok();
}

// Checks that the file can hold a model of `config` at all (at least one tensor per layer, and enough
// bytes for every parameter at 2 bytes each) before anything is allocated per layer: a config.json
// with a huge L or d_ff is refused here instead of building millions of expected tensor names. (The
// exact per-tensor checks that follow name a missing tensor precisely.)
Status CheckFileCanHold(const SafetensorsFile& file, const ModelConfig& c) {
  const long double C = c.width, F = c.d_ff;
  const long double per_layer = 2 * C + 3 * C * C + C * C + 2 * F * C + 2 * F + C * F + C;
  const long double parameters = static_cast<long double>(c.vocab_size) * C + C + c.layers * per_layer;
  const long double needed = 2 * parameters;  // bytes, at the smallest dtype (f16/bf16)
  const long double tensors = 2 + 10.0L * c.layers;
  if (needed > static_cast<long double>(file.mapping_size()) ||
      static_cast<size_t>(c.layers) > file.tensors().size()) {
    return Status::InvalidArgument(fmt::format(
        "{}: holds {} tensors in {} bytes, but config.json (V = {}, C = {}, L = {}, d_ff = {}) describes "
        "{:.0Lf} tensors and {:.0Lf} parameters (at least {:.0Lf} bytes)",
        file.path().string(), file.tensors().size(), file.mapping_size(), c.vocab_size, c.width, c.layers,
        c.d_ff, tensors, parameters, needed));
  }
  return Status::Ok();
}

// The tensor of `info` as the model keeps it: matrices in `dtype`, norms and biases in f32; a view of
// the mapping when no conversion is needed and the data is aligned, a converted copy otherwise.
StatusOr<Tensor> TensorOf(const SafetensorsFile& file, const SafetensorsTensorInfo& info, Dtype dtype,
                          std::vector<std::shared_ptr<const void>>& backing) {
  const Dtype stored = *ModelDtype(info.dtype);
  const Dtype wanted = IsNielsMatrix(info.name) ? dtype : Dtype::kF32;
  const std::byte* data = file.Data(info);
  if (stored == wanted && reinterpret_cast<uintptr_t>(data) % kernels::DtypeSize(stored) == 0) {
    return Tensor{data, stored, info.shape};
  }
  return ConvertedTensor(data, stored, info.shape, wanted, file.path().string() + ": tensor " + info.name, backing);
}

StatusOr<Weights> LoadChecked(const std::shared_ptr<const SafetensorsFile>& file, const ModelConfig& config,
                              std::optional<Dtype> requested) {
  NIELS_RETURN_IF_ERROR(CheckFileCanHold(*file, config));
  NIELS_RETURN_IF_ERROR(CheckTensors(*file, config));
  const SafetensorsTensorInfo& tok_emb = *file->Find("tok_emb.weight");
  const Dtype dtype = requested.value_or(*ModelDtype(tok_emb.dtype));
  Weights w;
  w.backing.push_back(file);
  w.blocks.resize(static_cast<size_t>(config.layers));
  Status status = Status::Ok();
  VisitNielsTensors(w, [&](const std::string& tensor, Tensor& slot) {
    if (!status.ok()) return;
    StatusOr<Tensor> loaded = TensorOf(*file, *file->Find(tensor), dtype, w.backing);
    if (loaded.ok()) {
      slot = std::move(loaded).value();
    } else {
      status = loaded.status();
    }
  });
  NIELS_RETURN_IF_ERROR(status);
  if (const SafetensorsTensorInfo* lm_head = file->Find(kLmHead)) {
    if (std::memcmp(file->Data(*lm_head), file->Data(tok_emb), tok_emb.end - tok_emb.begin) != 0) {
      return Status::InvalidArgument(file->path().string() +
                                     ": tensor lm_head.weight is not equal to tok_emb.weight "
                                     "(niels_gpt ties them; an untied lm_head is not supported)");
    }
  }
  w.lm_head = w.tok_emb;
  return w;
}

}  // namespace

bool IsNielsDir(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json", std::ios::binary);
  if (!in) return false;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const StatusOr<nlohmann::json> root = common::ParseJsonBounded(text, "config.json");
  return root.ok() && root->is_object() && root->contains("V");
}

StatusOr<Weights> LoadNielsWeights(const std::filesystem::path& safetensors_path, const ModelConfig& config,
                                   std::optional<Dtype> dtype) {
  if (dtype && !FileDtype(*dtype)) return Status::InvalidArgument("a niels model's weights are f32, f16 or bf16");
  try {
    auto file = SafetensorsFile::Open(safetensors_path);
    if (!file.ok()) return file.status();
    return LoadChecked(*file, config, dtype);
  } catch (const std::exception& e) {
    return Status::Internal(safetensors_path.string() + ": " + e.what());
  }
}

Status SaveNielsWeights(const Weights& weights, const std::filesystem::path& safetensors_path,
                        std::optional<Dtype> dtype) {
  const Dtype target = dtype.value_or(weights.dtype());
  if (!FileDtype(target)) return Status::InvalidArgument("SaveNielsWeights: f32, f16 or bf16 only");
  if (weights.lm_head.data != weights.tok_emb.data) {
    return Status::InvalidArgument("SaveNielsWeights: niels_gpt ties its output projection to tok_emb");
  }
  std::vector<std::shared_ptr<const void>> buffers;
  std::vector<formats::SafetensorsEntry> entries;
  Status status = Status::Ok();
  VisitNielsTensors(weights, [&](const std::string& name, const Tensor& t) {
    if (!status.ok()) return;
    if (!t.defined()) {
      status = Status::InvalidArgument("SaveNielsWeights: tensor " + name + " is undefined (not niels_gpt's layout)");
      return;
    }
    Tensor stored = t;
    if (t.dtype != target) {
      StatusOr<Tensor> converted = ConvertedTensor(t.data, t.dtype, t.shape, target, "tensor " + name, buffers);
      if (!converted.ok()) {
        status = converted.status();
        return;
      }
      stored = *converted;
    }
    entries.push_back({name, *FileDtype(target), stored.shape, stored.data});
  });
  NIELS_RETURN_IF_ERROR(status);
  return formats::WriteSafetensors(safetensors_path, entries);
}

StatusOr<std::unique_ptr<Model>> LoadNielsDir(const std::filesystem::path& dir,
                                              std::shared_ptr<kernels::WorkerPool> pool,
                                              const LoadOptions& options) {
  const auto config_path = dir / "config.json";
  const auto weights_path = dir / "model.safetensors";
  const auto tokenizer_path = dir / "tokenizer.model";

  auto config = model::LoadModelConfig(config_path);
  if (!config.ok()) return config.status();
  auto tokenizer = text::SentencePieceTokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return tokenizer.status();
  if ((*tokenizer)->vocab_size() != config->vocab_size) {
    return Status::InvalidArgument(config_path.string() + ": key \"V\" = " + std::to_string(config->vocab_size) +
                                   " disagrees with " + tokenizer_path.string() + ", which has " +
                                   std::to_string((*tokenizer)->vocab_size()) + " pieces");
  }
  // tok_emb.weight must be [V, C]: LoadNielsWeights reports a disagreement with the config's V.
  auto weights = LoadNielsWeights(weights_path, *config, options.dtype);
  if (!weights.ok()) return weights.status();

  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->format = ModelFormat::kNielsDir;
  model->config = *config;
  model->weights_file = std::make_shared<formats::MappedFileSet>(std::vector<std::shared_ptr<const formats::MappedFile>>{
      std::static_pointer_cast<const SafetensorsFile>(weights->backing.front())});
  LoadOptions converted = options;
  converted.dtype.reset();  // LoadNielsWeights converted the matrices already
  NIELS_RETURN_IF_ERROR(BuildTransformer(model.get(), std::move(weights).value(), std::move(pool), converted,
                                         dir.string()));
  model->special = (*tokenizer)->special();
  model->stop_ids = {model->special.eot};
  model->tokenizer = std::move(*tokenizer);
  return model;
}

}  // namespace niels::daemon::loaders
