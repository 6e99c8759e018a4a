#include "daemon/loaders/hf_dir.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/formats/safetensors.h"
#include "daemon/loaders/hf_config.h"
#include "daemon/loaders/tensor_import.h"
#include "daemon/loaders/tensor_slots.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/tokenizer_json.h"

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
using Json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr size_t kMaxShards = 4096;

StatusOr<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path.string() + ": cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::NotFound(path.string() + ": cannot read the file");
  return text.str();
}

// model.safetensors.index.json: the shard files in the order first named, and tensor -> shard.
struct ShardIndex {
  std::vector<std::string> files;
  std::map<std::string, std::string> shard_of;
};

StatusOr<ShardIndex> ReadIndex(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kIndexFile;
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  const std::string source = path.string();
  StatusOr<Json> parsed = common::ParseJsonBounded(*text, source);
  if (!parsed.ok()) return parsed.status();
  const Json& root = *parsed;
  if (!root.is_object()) return Status::InvalidArgument(source + ": invalid JSON: expected an object");
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object() || map->empty()) {
    return Status::InvalidArgument(source + ": key \"weight_map\" must be an object naming the shard of every tensor");
  }
  ShardIndex index;
  std::set<std::string> seen;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it->is_string()) {
      return Status::InvalidArgument(
          fmt::format("{}: weight_map[{}] must be a file name", source, common::JsonExcerpt(Json(it.key()))));
    }
    const std::string file = it->get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Status::InvalidArgument(
          fmt::format("{}: weight_map[{}] = {} is not a file name in this directory", source,
                      common::JsonExcerpt(Json(it.key())), common::JsonExcerpt(*it)));
    }
    if (seen.insert(file).second) index.files.push_back(file);
    if (index.files.size() > kMaxShards) {
      return Status::InvalidArgument(fmt::format("{}: more than {} shard files", source, kMaxShards));
    }
    index.shard_of[it.key()] = file;
  }
  return index;
}

// The mapped safetensors file(s) and every tensor in them by name.
struct Checkpoint {
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  std::unordered_map<std::string, std::pair<const SafetensorsFile*, const SafetensorsTensorInfo*>> tensors;
  size_t tensor_count() const { return tensors.size(); }
};

StatusOr<Checkpoint> OpenCheckpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  const bool single = std::filesystem::exists(dir / kSingleFile, ec);
  std::optional<ShardIndex> index;
  if (!single) {
    auto read = ReadIndex(dir);
    if (!read.ok()) {
      if (read.status().code() != common::StatusCode::kNotFound) return read.status();
      return Status::NotFound(fmt::format("{}: no weights: neither {} nor {}", dir.string(), kSingleFile, kIndexFile));
    }
    index = std::move(read).value();
  }
  Checkpoint checkpoint;
  const std::vector<std::string> names = single ? std::vector<std::string>{kSingleFile} : index->files;
  for (const std::string& name : names) {
    auto file = SafetensorsFile::Open(dir / name);
    if (!file.ok()) {
      if (index && file.status().code() == common::StatusCode::kNotFound) {
        return Status::NotFound(fmt::format("{}: shard {} named by {} is missing", (dir / name).string(), name,
                                            (dir / kIndexFile).string()));
      }
      return file.status();
    }
    for (const SafetensorsTensorInfo& info : (*file)->tensors()) {
      auto [it, added] = checkpoint.tensors.try_emplace(info.name, file->get(), &info);
      if (!added) {
        return Status::InvalidArgument(fmt::format("{}: tensor {} is also in {}", (*file)->path().string(),
                                                   info.name, it->second.first->path().string()));
      }
    }
    checkpoint.files.push_back(std::move(file).value());
  }
  if (index) {
    for (const auto& [tensor, shard] : index->shard_of) {
      auto it = checkpoint.tensors.find(tensor);
      if (it == checkpoint.tensors.end() || it->second.first->path().filename() != shard) {
        return Status::InvalidArgument(fmt::format("{}: names tensor {} in {}, which does not hold it",
                                                   (dir / kIndexFile).string(), tensor, (dir / shard).string()));
      }
    }
    for (const auto& [tensor, where] : checkpoint.tensors) {
      if (!index->shard_of.count(tensor)) {
        return Status::InvalidArgument(fmt::format("{}: tensor {} is not listed in {}", where.first->path().string(),
                                                   tensor, (dir / kIndexFile).string()));
      }
    }
  }
  return checkpoint;
}

// Tensors a checkpoint may hold beyond the model's: rotary inverse frequencies (derived from the
// config), and a tied lm_head equal to the embedding.
Status CheckExtraTensor(const Checkpoint& checkpoint, const std::string& name, const ModelConfig& config) {
  const auto& [file, info] = checkpoint.tensors.at(name);
  const std::string_view inv_freq = ".rotary_emb.inv_freq";
  if (name.size() > inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0) {
    return Status::Ok();
  }
  if (name == "lm_head.weight" && config.tied_embeddings) {
    auto embed = checkpoint.tensors.find("model.embed_tokens.weight");
    if (embed != checkpoint.tensors.end()) {
      const auto& [efile, einfo] = embed->second;
      if (einfo->dtype == info->dtype && einfo->shape == info->shape &&
          std::memcmp(efile->Data(*einfo), file->Data(*info), info->end - info->begin) == 0) {
        return Status::Ok();
      }
    }
    return Status::InvalidArgument(fmt::format(
        "{}: tensor lm_head.weight differs from model.embed_tokens.weight, but config.json says "
        "tie_word_embeddings: true",
        file->path().string()));
  }
  return Status::InvalidArgument(fmt::format("{}: unexpected tensor {} {} (not part of a {} model with these settings)",
                                             file->path().string(), name, ShapeString(info->shape),
                                             model::ArchitectureName(config.architecture)));
}

StatusOr<Weights> LoadHfWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                 const std::filesystem::path& config_path) {
  if (config.layers * kTensorsPerLayer > static_cast<int64_t>(checkpoint.tensor_count())) {
    return Status::InvalidArgument(fmt::format("{}: num_hidden_layers = {}, but the checkpoint holds only {} tensors",
                                               config_path.string(), config.layers, checkpoint.tensor_count()));
  }
  Weights w;
  for (const auto& file : checkpoint.files) w.backing.push_back(file);
  std::set<std::string> used;
  for (TensorSlot& slot : FamilyTensorSlots(config, TensorNaming::kHuggingFace, &w)) {
    auto it = checkpoint.tensors.find(slot.name);
    if (it == checkpoint.tensors.end()) {
      return Status::InvalidArgument(fmt::format("{}: missing tensor {} {} (config.json: {})",
                                                 checkpoint.files.front()->path().parent_path().string(), slot.name,
                                                 ShapeString(slot.shape), model::ArchitectureName(config.architecture)));
    }
    const auto& [file, info] = it->second;
    const std::string where = file->path().string() + ": tensor " + slot.name;
    const std::optional<Dtype> dtype = ModelDtype(info->dtype);
    if (!dtype) {
      return Status::InvalidArgument(fmt::format("{} has dtype {}, expected F32, F16 or BF16", where,
                                                 SafetensorsDtypeName(info->dtype)));
    }
    if (info->shape != slot.shape) {
      return Status::InvalidArgument(fmt::format("{} has shape {}, expected {} (from {})", where,
                                                 ShapeString(info->shape), ShapeString(slot.shape), config_path.string()));
    }
    auto tensor = ImportTensor(file->Data(*info), *dtype, info->shape, slot.matrix, where, w.backing);
    if (!tensor.ok()) return tensor.status();
    *slot.slot = std::move(tensor).value();
    used.insert(slot.name);
  }
  for (const auto& [name, where] : checkpoint.tensors) {
    if (!used.count(name)) NIELS_RETURN_IF_ERROR(CheckExtraTensor(checkpoint, name, config));
  }
  if (config.tied_embeddings) w.lm_head = w.tok_emb;
  if (config.rope_scaling.type == model::RopeScaling::Type::kLlama3) {
    w.rope_freqs = model::OwnedTensor(model::Llama3RopeFactors(config), {config.head_dim() / 2}, w.backing);
  }
  return w;
}

// tokenizer.json (+ tokenizer_config.json) as a BpeSpec padded to the model's vocabulary.
StatusOr<text::BpeSpec> LoadHfTokenizerSpec(const std::filesystem::path& dir, const ModelConfig& config) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "tokenizer.json", ec) && std::filesystem::exists(dir / "tokenizer.model", ec)) {
    return Status::InvalidArgument(fmt::format(
        "{}: no tokenizer.json, only a SentencePiece tokenizer.model: nielsd runs byte-level BPE tokenizers "
        "(tokenizer.json) of Hugging Face directories",
        dir.string()));
  }
  auto spec = text::LoadBpeSpecFromDirectory(dir);
  if (!spec.ok()) {
    if (spec.status().code() == common::StatusCode::kUnimplemented) {
      return Status::InvalidArgument(std::string(spec.status().message()));
    }
    return spec.status();
  }
  if (static_cast<int64_t>(spec->pieces.size()) > config.vocab_size) {
    return Status::InvalidArgument(fmt::format("{}: {} token ids, more than config.json's vocab_size = {}",
                                               (dir / "tokenizer.json").string(), spec->pieces.size(),
                                               config.vocab_size));
  }
  // Qwen's embedding has rows past the tokenizer's ids: ids without a token.
  spec->pieces.resize(static_cast<size_t>(config.vocab_size));
  spec->types.resize(static_cast<size_t>(config.vocab_size), text::TokenType::kUnused);
  return spec;
}

// The eos ids of generation_config.json when it names any, else config.json's; plus the
// tokenizer's eos; each must be an id of the model.
StatusOr<std::vector<int32_t>> HfStopIds(const std::filesystem::path& dir, const HfConfig& hf,
                                         const text::BpeSpec& spec) {
  std::vector<int32_t> ids = hf.eos_ids;
  std::string source = (dir / "config.json").string();
  const std::filesystem::path generation = dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(generation, ec)) {
    auto text = ReadText(generation);
    if (!text.ok()) return text.status();
    auto eos = ParseGenerationConfigEos(*text, generation.string());
    if (!eos.ok()) return eos.status();
    if (!eos->empty()) {
      ids = std::move(eos).value();
      source = generation.string();
    }
  }
  for (int32_t id : ids) {
    if (id >= hf.config.vocab_size) {
      return Status::InvalidArgument(fmt::format("{}: eos_token_id {} is not an id of the model (vocab_size {})",
                                                 source, id, hf.config.vocab_size));
    }
  }
  if (spec.special.eos) ids.push_back(*spec.special.eos);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: no end-of-sequence id (eos_token_id in generation_config.json or config.json, or eos_token in "
        "tokenizer_config.json): nielsd would not know where a reply ends",
        dir.string()));
  }
  return ids;
}

}  // namespace

StatusOr<std::vector<std::filesystem::path>> HfWeightFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / kSingleFile, ec)) return std::vector<std::filesystem::path>{dir / kSingleFile};
  auto index = ReadIndex(dir);
  if (!index.ok()) {
    if (index.status().code() != common::StatusCode::kNotFound) return index.status();
    return Status::NotFound(fmt::format("{}: no weights: neither {} nor {}", dir.string(), kSingleFile, kIndexFile));
  }
  std::vector<std::filesystem::path> files{dir / kIndexFile};
  for (const std::string& name : index->files) files.push_back(dir / name);
  return files;
}

StatusOr<std::unique_ptr<Model>> LoadHfDir(const std::filesystem::path& dir, std::shared_ptr<kernels::WorkerPool> pool,
                                           const LoadOptions& options) {
  const std::filesystem::path config_path = dir / "config.json";
  auto config_text = ReadText(config_path);
  if (!config_text.ok()) return config_text.status();
  auto hf = ParseHfConfig(*config_text, config_path.string());
  if (!hf.ok()) return hf.status();
  auto spec = LoadHfTokenizerSpec(dir, hf->config);
  if (!spec.ok()) return spec.status();
  auto stop_ids = HfStopIds(dir, *hf, *spec);
  if (!stop_ids.ok()) return stop_ids.status();
  auto checkpoint = OpenCheckpoint(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  auto weights = LoadHfWeights(*checkpoint, hf->config, config_path);
  if (!weights.ok()) return weights.status();

  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->format = ModelFormat::kHfDir;
  model->config = hf->config;
  if (model->config.name.empty()) model->config.name = dir.filename().string();
  model->stop_ids = std::move(stop_ids).value();
  const text::SpecialTokenIds special = spec->special;
  auto tokenizer = text::BpeTokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) {
    return Status::InvalidArgument(fmt::format("{}: {}", (dir / "tokenizer.json").string(), tokenizer.status().message()));
  }
  model->chat_template = (*tokenizer)->chat_template();
  if (special.bos) model->bos_token = (*tokenizer)->Piece(*special.bos);
  if (special.eos) model->eos_token = (*tokenizer)->Piece(*special.eos);
  model->bos_id = special.bos;
  if (special.add_bos && special.bos) model->add_bos_id = special.bos;
  model->tokenizer = std::move(tokenizer).value();
  std::vector<std::shared_ptr<const formats::MappedFile>> files(checkpoint->files.begin(), checkpoint->files.end());
  model->weights_file = std::make_shared<formats::MappedFileSet>(std::move(files));
  NIELS_RETURN_IF_ERROR(BuildTransformer(model.get(), std::move(weights).value(), std::move(pool), options,
                                         dir.string()));
  return model;
}

}  // namespace niels::daemon::loaders
