#pragma once
// LoadModel: turns a model on disk into a Model nielsd can run (docs/ARCHITECTURE.md, "Loading a
// model"). Every model format is a loader behind this one entry point; the daemon and the tools
// use nothing else:
//   - a niels model directory (config.json with "V", model.safetensors, tokenizer.model):
//     niels_dir.h.
// Every error names the file and the key or tensor and what was expected; nothing is served that
// cannot be run correctly.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/formats/safetensors.h"
#include "daemon/kernels/dtype.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/transformer.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::loaders {

// A loaded model: what the engine runs.
struct Model {
  std::filesystem::path dir;  // where it was loaded from
  model::ModelConfig config;
  std::unique_ptr<model::Transformer> transformer;
  std::unique_ptr<text::Tokenizer> tokenizer;
  // niels_gpt's four role markers (its token-native chat template, text/chat_template.h); all -1
  // for a model without them.
  text::SpecialTokens special;
  // The ids that end a reply when a request names none (end of turn, end of text: the eos ids of
  // generation_config.json or config.json, tokenizer.ggml.eos_token_id and eot_token_id...). Never
  // empty.
  std::vector<int32_t> stop_ids;
  // The model's own Jinja chat template (tokenizer_config.json "chat_template", GGUF
  // tokenizer.chat_template); empty when the model has none (niels_gpt: its token-native template,
  // text/chat_template.h).
  std::string chat_template;
  // What the template's context calls bos_token and eos_token (their text; "" when none).
  std::string bos_token;
  std::string eos_token;
  // The BOS id when the tokenizer prepends one to an encoded prompt (tokenizer.json's
  // post-processor, tokenizer_config.json add_bos_token, GGUF tokenizer.ggml.add_bos_token); the
  // engine adds it once to a rendered chat prompt that does not already start with it.
  std::optional<int32_t> add_bos_id;
  // The weights file as mapped (the transformer may read its weights straight from the mapping):
  // the engine asks it CheckUnchanged() before every generation. Null for models built in memory.
  std::shared_ptr<const formats::SafetensorsFile> weights_file;
};

// How a process keeps a loaded model (nielsd --dtype, --kv-dtype).
struct LoadOptions {
  // The dtype of the weight matrices in memory; nullopt = the file's (no conversion, no copy).
  std::optional<kernels::Dtype> dtype;
  // The element type of KV caches (f32 or f16): the transformer's own (Forward) cache, and the
  // engine's KV pool (EngineOptions::model_options).
  kernels::Dtype kv_dtype = kernels::Dtype::kF32;
};

// Loads the model at `path` in whichever format it is. `pool` runs the model's kernels
// (Transformer); nullptr = a 1-thread pool. NOT_FOUND when there is nothing there; INVALID_ARGUMENT
// naming the file and what is wrong otherwise.
common::StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& path,
                                                   std::shared_ptr<kernels::WorkerPool> pool = nullptr,
                                                   const LoadOptions& options = {});

}  // namespace niels::daemon::loaders
