#include "daemon/loaders/model_loader.h"

#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/formats/gguf_file.h"
#include "daemon/loaders/gguf_model.h"
#include "daemon/loaders/hf_dir.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

using common::Status;
using common::StatusOr;

namespace {

// The files of a Hugging Face directory, in a fixed order: the configs, the tokenizer, the weights.
StatusOr<std::vector<std::filesystem::path>> HfFiles(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files{dir / "config.json"};
  std::error_code ec;
  for (const char* optional : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    if (std::filesystem::exists(dir / optional, ec)) files.push_back(dir / optional);
  }
  auto weights = HfWeightFiles(dir);
  if (!weights.ok()) return weights.status();
  files.insert(files.end(), weights->begin(), weights->end());
  return files;
}

StatusOr<ModelSource> FindDirectorySource(const std::filesystem::path& dir) {
  const std::filesystem::path config = dir / "config.json";
  std::ifstream in(config, std::ios::binary);
  if (!in) {
    return Status::NotFound(fmt::format("{}: cannot read: {} is not a model directory", config.string(), dir.string()));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(text, config.string());
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& root = *parsed;
  ModelSource source;
  source.path = dir;
  source.name = dir.filename().string();
  if (root.is_object() && root.contains("V")) {
    source.format = ModelFormat::kNielsDir;
    source.files = {config, dir / "model.safetensors", dir / "tokenizer.model"};
    if (auto name = root.find("name"); name != root.end() && name->is_string() && !name->get<std::string>().empty()) {
      source.name = name->get<std::string>();
    }
    return source;
  }
  if (root.is_object() && root.contains("architectures")) {
    source.format = ModelFormat::kHfDir;
    auto files = HfFiles(dir);
    if (!files.ok()) return files.status();
    source.files = std::move(files).value();
    return source;
  }
  return Status::InvalidArgument(fmt::format(
      "{}: neither a niels model directory (key \"V\") nor a Hugging Face one (key \"architectures\")",
      config.string()));
}

}  // namespace

std::string_view ModelFormatName(ModelFormat format) {
  switch (format) {
    case ModelFormat::kNielsDir: return "niels directory";
    case ModelFormat::kHfDir: return "Hugging Face directory";
    case ModelFormat::kGguf: return "GGUF";
  }
  return "unknown";
}

StatusOr<ModelSource> FindModelSource(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return FindDirectorySource(path);
  if (!std::filesystem::exists(path, ec)) {
    return Status::NotFound(fmt::format("{}: no such model (expected a model directory or a GGUF file)", path.string()));
  }
  if (!IsGgufFile(path)) {
    return Status::InvalidArgument(
        fmt::format("{}: neither a model directory nor a GGUF file (which starts with \"GGUF\")", path.string()));
  }
  auto file = formats::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  ModelSource source;
  source.format = ModelFormat::kGguf;
  source.path = path;
  source.files = {path};
  auto name = (*file)->GetString("general.name");
  source.name = name.ok() && !name->empty() ? std::string(*name) : path.stem().string();
  return source;
}

StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& path, std::shared_ptr<kernels::WorkerPool> pool,
                                           const LoadOptions& options) {
  if (options.max_context < 0) return Status::InvalidArgument("LoadOptions::max_context must be >= 0");
  auto source = FindModelSource(path);
  if (!source.ok()) return source.status();
  const ModelFormat format = source->format;
  try {
    switch (format) {
      case ModelFormat::kNielsDir: return LoadNielsDir(path, std::move(pool), options);
      case ModelFormat::kHfDir: return LoadHfDir(path, std::move(pool), options);
      case ModelFormat::kGguf: return LoadGgufModel(path, std::move(pool), options);
    }
  } catch (const std::exception& e) {
    return Status::Internal(path.string() + ": " + e.what());
  }
  return Status::Internal(path.string() + ": unknown model format");
}

Status BuildTransformer(Model* model, model::Weights weights, std::shared_ptr<kernels::WorkerPool> pool,
                        const LoadOptions& options, const std::string& where) {
  model->model_context = model->config.context;
  if (options.max_context > 0 && model->config.context > options.max_context) {
    model->config.context = options.max_context;
  }
  if (options.dtype && kernels::IsQuantized(*options.dtype)) {
    return Status::InvalidArgument("--dtype: weights convert at load to f32, f16 or bf16 only");
  }
  if (options.dtype) {
    auto converted = model::ConvertWeights(weights, *options.dtype);
    if (!converted.ok()) return Status::InvalidArgument(where + ": " + std::string(converted.status().message()));
    weights = std::move(converted).value();
  }
  NIELS_RETURN_IF_ERROR(model::CheckShapes(weights, model->config, where));
  try {
    model->transformer =
        std::make_unique<model::Transformer>(model->config, std::move(weights), std::move(pool), options.kv_dtype);
  } catch (const std::exception& e) {
    return Status::Internal(where + ": building the transformer failed: " + e.what());
  }
  return Status::Ok();
}

int64_t MappedWeightBytes(const Model& model) {
  if (!model.weights_file || !model.transformer) return 0;
  int64_t total = 0;
  for (const auto& file : model.weights_file->files()) {
    total += model::BytesWithin(model.transformer->weights(), file->mapping_data(), file->mapping_size());
  }
  return total;
}

int64_t KvBytesPerToken(const model::ModelConfig& config, kernels::Dtype kv_dtype) {
  return 2 * config.layers * config.kv_head_count() * config.head_dim() * kernels::DtypeSize(kv_dtype);
}

}  // namespace niels::daemon::loaders
