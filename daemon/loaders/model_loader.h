#pragma once
// LoadModel: turns a model on disk into a Model nielsd can run (docs/ARCHITECTURE.md, "Loading a
// model"). Every model format is a loader behind this one entry point; the daemon and the tools
// use nothing else. What is at the path decides the format:
//   - a niels model directory (config.json with "V", model.safetensors, tokenizer.model):
//     niels_dir.h;
//   - a Hugging Face directory (config.json with "architectures": LlamaForCausalLM,
//     Qwen2ForCausalLM, Qwen3ForCausalLM; safetensors, single or sharded; tokenizer.json):
//     hf_dir.h;
//   - a GGUF file (llama.cpp's format; architectures llama, qwen2, qwen3): gguf_model.h.
// Every error names the file and the key or tensor and what was expected; nothing is served that
// cannot be run correctly.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/formats/mapped_file.h"
#include "daemon/kernels/dtype.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/model/config.h"
#include "daemon/model/transformer.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::loaders {

enum class ModelFormat : uint8_t { kNielsDir, kHfDir, kGguf };
// "niels directory", "Hugging Face directory", "GGUF".
std::string_view ModelFormatName(ModelFormat format);

// A loaded model: what the engine runs.
struct Model {
  std::filesystem::path dir;  // where it was loaded from (a directory, or the GGUF file)
  ModelFormat format = ModelFormat::kNielsDir;
  // config.context is the context nielsd runs with: the model's own (model_context) capped at
  // LoadOptions::max_context.
  model::ModelConfig config;
  int64_t model_context = 0;  // the context the model's files declare
  std::unique_ptr<model::Transformer> transformer;
  std::unique_ptr<text::Tokenizer> tokenizer;
  // niels_gpt's four role markers (its token-native chat template, text/chat_template.h); all -1
  // for a model without them.
  text::SpecialTokens special;
  // The ids that end a reply when a request names none (end of turn, end of text: the eos ids of
  // generation_config.json or config.json, tokenizer.ggml.eos_token_id and eot_token_id...),
  // ascending. Never empty.
  std::vector<int32_t> stop_ids;
  // The model's own Jinja chat template (tokenizer_config.json "chat_template", GGUF
  // tokenizer.chat_template); empty when the model has none (niels_gpt: its token-native template,
  // text/chat_template.h).
  std::string chat_template;
  // What the template's context calls bos_token and eos_token (their text; "" when none).
  std::string bos_token;
  std::string eos_token;
  // The vocabulary's beginning-of-sequence id (tokenizer.json / tokenizer_config.json's bos token,
  // GGUF tokenizer.ggml.bos_token_id); nullopt when it names none (InfoResponse.bos_id).
  std::optional<int32_t> bos_id;
  // The BOS id when the tokenizer prepends one to an encoded prompt (tokenizer.json's
  // post-processor, tokenizer_config.json add_bos_token, GGUF tokenizer.ggml.add_bos_token); the
  // engine adds it once to a rendered chat prompt that does not already start with it.
  std::optional<int32_t> add_bos_id;
  // The file(s) the weights were mapped from (the transformer may read its weights straight from
  // the mappings): the engine asks CheckUnchanged() before every generation. Null for models built
  // in memory.
  std::shared_ptr<const formats::MappedFileSet> weights_file;
};

// The context a process runs with unless told otherwise: a model that declares more (Llama 3.1's
// 131072) would otherwise size its RoPE table and KV admission for it.
inline constexpr int64_t kDefaultMaxContext = 32768;

// How a process keeps a loaded model (nielsd --dtype, --kv-dtype, --max-context).
struct LoadOptions {
  // The dtype of the weight matrices in memory; nullopt = the file's (no conversion, no copy).
  std::optional<kernels::Dtype> dtype;
  // The element type of KV caches (f32 or f16): the transformer's own (Forward) cache, and the
  // engine's KV pool (EngineOptions::model_options).
  kernels::Dtype kv_dtype = kernels::Dtype::kF32;
  // The largest context to run with: config.context = min(the model's, max_context). 0 = the
  // model's own, uncapped.
  int64_t max_context = kDefaultMaxContext;
};

// What is at a path, found without loading it: the format, the files that make up the model (in
// a fixed order: what the durable state's model fingerprint hashes) and a display name.
struct ModelSource {
  ModelFormat format = ModelFormat::kNielsDir;
  std::filesystem::path path;
  std::vector<std::filesystem::path> files;
  std::string name;  // config.json "name", GGUF general.name, else the directory or file name
};

// NOT_FOUND when there is nothing at `path` (or a directory without config.json);
// INVALID_ARGUMENT naming the file when it is neither format (a config.json with neither "V" nor
// "architectures", a file that does not start with "GGUF", an unreadable shard index).
common::StatusOr<ModelSource> FindModelSource(const std::filesystem::path& path);

// Loads the model at `path` in whichever format it is. `pool` runs the model's kernels
// (Transformer); nullptr = a 1-thread pool. NOT_FOUND when there is nothing there; INVALID_ARGUMENT
// naming the file and what is wrong otherwise.
common::StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& path,
                                                   std::shared_ptr<kernels::WorkerPool> pool = nullptr,
                                                   const LoadOptions& options = {});

// For the loaders: caps model->config.context at options.max_context (keeping the model's own in
// model->model_context), converts the matrices to options.dtype when set, checks the shapes
// against the config (model::CheckShapes, naming `where`) and builds model->transformer.
common::Status BuildTransformer(Model* model, model::Weights weights, std::shared_ptr<kernels::WorkerPool> pool,
                                const LoadOptions& options, const std::string& where);

// Bytes of the model's weights used straight from its files' mappings (not copied or converted).
int64_t MappedWeightBytes(const Model& model);

// Bytes one position takes in a KV cache of `kv_dtype`: K and V of every layer, n_kv_heads x
// head_dim each (2 x L x KV x D x the dtype's size).
int64_t KvBytesPerToken(const model::ModelConfig& config, kernels::Dtype kv_dtype);

}  // namespace niels::daemon::loaders
