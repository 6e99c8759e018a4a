#include "daemon/model/model_dir.h"

#include <exception>
#include <string>
#include <utility>

#include "daemon/model/weights.h"

namespace niels::daemon::model {

using common::Status;
using common::StatusOr;

StatusOr<std::unique_ptr<Model>> LoadModelDir(const std::filesystem::path& dir,
                                              std::shared_ptr<kernels::WorkerPool> pool,
                                              const ModelDirOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir.string() + ": not a model directory (expected config.json, "
                            "model.safetensors, tokenizer.model)");
  }
  const auto config_path = dir / "config.json";
  const auto weights_path = dir / "model.safetensors";
  const auto tokenizer_path = dir / "tokenizer.model";

  auto config = LoadModelConfig(config_path);
  if (!config.ok()) return config.status();
  auto tokenizer = text::Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return tokenizer.status();
  if ((*tokenizer)->vocab_size() != config->vocab_size) {
    return Status::InvalidArgument(config_path.string() + ": key \"V\" = " + std::to_string(config->vocab_size) +
                                   " disagrees with " + tokenizer_path.string() + ", which has " +
                                   std::to_string((*tokenizer)->vocab_size()) + " pieces");
  }
  // tok_emb.weight must be [V, C]: LoadWeights reports a disagreement with the config's V.
  auto weights = LoadWeights(weights_path, *config, LoadOptions{.dtype = options.dtype});
  if (!weights.ok()) return weights.status();

  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->config = *config;
  model->weights_file = std::static_pointer_cast<const SafetensorsFile>(weights->backing.front());
  try {
    model->transformer = std::make_unique<Transformer>(*config, std::move(*weights), std::move(pool), options.kv_dtype);
  } catch (const std::exception& e) {
    return Status::Internal(dir.string() + ": building the transformer failed: " + e.what());
  }
  model->tokenizer = std::move(*tokenizer);
  return model;
}

}  // namespace niels::daemon::model
