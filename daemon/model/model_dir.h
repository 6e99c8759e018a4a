#pragma once
// LoadModelDir: opens a model directory (config.json, model.safetensors, tokenizer.model) and checks
// that its parts agree. This is the only entry point the daemon and tools use to load a model.

#include <filesystem>
#include <memory>
#include <optional>

#include "common/status.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/safetensors.h"
#include "daemon/text/tokenizer.h"
#include "daemon/model/transformer.h"

namespace niels::daemon::model {

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<text::Tokenizer> tokenizer;
  // model.safetensors as mapped (the transformer may read its weights straight from the mapping):
  // the engine asks it CheckUnchanged() before every generation. Null for models built in memory.
  std::shared_ptr<const SafetensorsFile> weights_file;
};

// How a process keeps a loaded model (nielsd --dtype, --kv-dtype).
struct ModelDirOptions {
  // The dtype of the weight matrices in memory; nullopt = the file's (no conversion, no copy).
  std::optional<kernels::Dtype> dtype;
  // The element type of KV caches (f32 or f16): the transformer's own (Forward) cache, and the
  // engine's KV pool (EngineOptions::model_options).
  kernels::Dtype kv_dtype = kernels::Dtype::kF32;
};

// Errors name the file (and the key or tensor): see LoadModelConfig, LoadWeights, Tokenizer::Load;
// plus INVALID_ARGUMENT when config V, tok_emb rows and the tokenizer's vocab size disagree.
// `pool` runs the model's kernels (Transformer); nullptr = a 1-thread pool.
common::StatusOr<std::unique_ptr<Model>> LoadModelDir(const std::filesystem::path& dir,
                                                      std::shared_ptr<kernels::WorkerPool> pool = nullptr,
                                                      const ModelDirOptions& options = {});

}  // namespace niels::daemon::model
