#pragma once
// Reading a Hugging Face config.json (and generation_config.json) of the Llama family into a
// ModelConfig (docs/ARCHITECTURE.md, "Loading a model").
//
// Supported: "architectures" LlamaForCausalLM (Llama 3.x, SmolLM2, Mistral-style configs),
// Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (q/k norms); keys hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size, vocab_size, max_position_embeddings
// (required positive integers), num_key_value_heads and head_dim (null or absent: H and C / H),
// rope_theta (default 10000), rms_norm_eps (default 1e-6), hidden_act "silu", tie_word_embeddings,
// attention_bias (Llama, Qwen3), mlp_bias (Llama), rope_scaling null / "default" / "llama3"
// (rope_type or type; factor, low_freq_factor, high_freq_factor, original_max_position_embeddings),
// transformers 5's rope_parameters (rope_theta and the same rope types), bos_token_id and
// eos_token_id (an id or a list of ids). Refused, naming the key and value: any other architecture
// or rope type, another hidden_act, partial_rotary_factor != 1, a quantization_config, a sliding
// window in use (use_sliding_window true, or layer_types other than full_attention).
// Keys not named here are ignored. Pure parsing (nlohmann json); safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/model/config.h"

namespace niels::daemon::loaders {

struct HfConfig {
  model::ModelConfig config;
  std::optional<int32_t> bos_id;  // "bos_token_id"
  std::vector<int32_t> eos_ids;   // "eos_token_id" (one id or a list); empty when absent or null
};

// Parses the text of a config.json; `source` names it in messages. INVALID_ARGUMENT naming the
// source and the key for invalid JSON, a missing or mistyped key, a value out of range
// (ValidateModelConfig) and everything refused above.
common::StatusOr<HfConfig> ParseHfConfig(std::string_view json, const std::string& source);

// The "eos_token_id" of a generation_config.json (an id or a list of ids; empty when absent or
// null). INVALID_ARGUMENT naming the source for invalid JSON or another type.
common::StatusOr<std::vector<int32_t>> ParseGenerationConfigEos(std::string_view json, const std::string& source);

}  // namespace niels::daemon::loaders
