#pragma once
// The model hyperparameters of a GGUF file of the Llama family, from its metadata as llama.cpp
// writes it and its tensor table (docs/ARCHITECTURE.md, "Loading a model").
//
// general.architecture "llama", "qwen2" or "qwen3", and under that prefix: context_length,
// embedding_length, block_count, feed_forward_length, attention.head_count (required),
// attention.head_count_kv (default: head_count), attention.key_length = attention.value_length
// (default: embedding_length / head_count), attention.layer_norm_rms_epsilon (required),
// rope.freq_base (default 10000), rope.dimension_count (must be the head size when present),
// vocab_size (must be token_embd's rows when present); general.name. From the tensor table: V
// (token_embd.weight's rows), a tied head (no output.weight), q/k/v biases (blk.0.attn_q.bias; always
// for qwen2), an MLP with biases (blk.0.ffn_up.bias, llama), llama3 frequency scaling
// (rope_freqs.weight, llama). llama's q and k rows are stored interleaved (qk_rows_interleaved);
// qwen2 and qwen3 keep Hugging Face's order.
// Refused, naming the key or tensor: another architecture, rope.scaling.type other than "none",
// a linear rope scale, experts (expert_count > 0), key_length != value_length, a rotated dimension
// count other than the head size.
// Pure: reads the GgufFile only. Safe from any thread.

#include "common/status.h"
#include "daemon/formats/gguf_file.h"
#include "daemon/model/config.h"

namespace niels::daemon::loaders {

// INVALID_ARGUMENT naming the file and the key (or tensor) for a missing or mistyped key, a value
// out of range (ValidateModelConfig) and everything refused above.
common::StatusOr<model::ModelConfig> GgufModelConfig(const formats::GgufFile& file);

}  // namespace niels::daemon::loaders
