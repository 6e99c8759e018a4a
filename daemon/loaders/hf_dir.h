#pragma once
// The Hugging Face model directory of the Llama family (docs/ARCHITECTURE.md, "Loading a model"):
//   config.json              the architecture and sizes (hf_config.h)
//   model.safetensors        the weights, or the shards model-0000i-of-0000N.safetensors with
//                            model.safetensors.index.json naming the shard of every tensor; each
//                            file is mapped and its matrices used from the mapping in their own
//                            dtype (f32, f16 or bf16, per tensor as the file says; norms and
//                            biases widened to f32); names and shapes in tensor_slots.h
//   tokenizer.json           byte-level BPE (text/tokenizer_json.h), with tokenizer_config.json
//                            (chat template, bos/eos tokens, add_bos_token) when present
//   generation_config.json   optional: eos_token_id (an id or a list) -> the stop ids
// Stop ids: generation_config.json's eos ids, else config.json's, plus tokenizer_config.json's
// eos_token. A vocabulary smaller than config.json's vocab_size (Qwen pads its embedding) is
// padded with unused ids; a larger one is refused.
//
// Every error names the file and the key or tensor: an unsupported architecture or rope scaling,
// a missing, extra or misshapen tensor, a dtype other than F32/F16/BF16, a missing shard, an index
// naming a tensor its shard lacks, a tensor in two shards, a tokenizer nielsd cannot run.

#include <filesystem>
#include <memory>
#include <vector>

#include "common/status.h"
#include "daemon/loaders/model_loader.h"

namespace niels::daemon::loaders {

// The safetensors file(s) of `dir`: model.safetensors when it exists, else the shards
// model.safetensors.index.json names (each once, in the order first named). NOT_FOUND when
// neither exists; INVALID_ARGUMENT naming the index for invalid JSON, a weight_map that is not an
// object of file names, or a shard name that is not a plain file name of this directory.
common::StatusOr<std::vector<std::filesystem::path>> HfWeightFiles(const std::filesystem::path& dir);

// Loads a Hugging Face directory (LoadModel's contract).
common::StatusOr<std::unique_ptr<Model>> LoadHfDir(const std::filesystem::path& dir,
                                                   std::shared_ptr<kernels::WorkerPool> pool,
                                                   const LoadOptions& options);

}  // namespace niels::daemon::loaders
