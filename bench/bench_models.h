#pragma once
// The model shapes nielsd-bench runs with random weights held in memory: niels_gpt's presets and
// two real members of the Llama family, and random weights of any of them in a weight dtype or a
// quantization mix. Bench-only: random values, no file.
//
// Presets (ModelConfig with every architecture flag the real model's config has):
//   personal     niels_gpt, V 16000, T 512,  C 384,  L 8,  H 6,        d_ff 1152
//   base         niels_gpt, V 16000, T 1024, C 512,  L 8,  H 8,        d_ff 1536
//   qwen3-0.6b   Qwen3-0.6B:   V 151936, C 1024, L 28, H 16, KV 8, D 128, F 3072, q/k norm, tied
//   llama3.2-1b  Llama-3.2-1B: V 128256, C 2048, L 16, H 32, KV 8, D 64,  F 8192, llama3 rope
//                scaling (factor 32, original context 8192), tied; q/k rows in llama.cpp's
//                interleaved order, as its GGUF holds them
// The two family presets get T 8192 (the real models allow 40960 and 131072; T only sizes tables
// and caps the prompt).

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::bench {

// The config of a preset named above; nullopt for another name.
std::optional<daemon::model::ModelConfig> PresetConfig(const std::string& name);

// A weight "mix": one dtype for every matrix (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k), or q4_k_m,
// llama.cpp's Q4_K_M recipe (llama_model_quantize for LLAMA_FTYPE_MOSTLY_Q4_K_M): q4_k for every
// matrix but the output projection / tied embedding (q6_k) and attn_v and ffn_down of the layers
// its use_more_bits picks (the first and last eighth, every third between: q6_k). q8_0 and q4_0
// follow llama.cpp too: their output projection / tied embedding is q6_k for q4_0, q8_0 for q8_0.
// Returns false for another name.
bool IsWeightMix(const std::string& name);

// Why `config`'s shapes cannot be drawn in `mix` (a row length that is not whole blocks of the type
// the mix gives it, after the q6_k -> q8_0 fallback: q4_k on the `personal` width of 384), or
// nullopt. REQUIRES: IsWeightMix(mix).
std::optional<std::string> WeightMixProblem(const daemon::model::ModelConfig& config, const std::string& mix);

// Random weights of `config`'s shapes in the mix (seeded, deterministic): matrices drawn from
// normal(0, gain / sqrt(columns)) as tests/tools/make_family_model.py draws them (q and k with gain 2
// so that attention is not uniform, the embedding with std 4 / sqrt(C)), norms 1 + normal(0, 0.2)
// (q/k norms twice that), biases normal(0, 0.5). Each matrix is converted as soon as it is drawn,
// so memory peaks at the converted model plus one f32 matrix. Block-type matrices are quantized
// with QuantizeBlocks (ggml's quantizers), split among `threads` threads.
// A q6_k matrix whose rows are not whole 256-value blocks is q8_0 instead (llama.cpp's fallback).
// REQUIRES: IsWeightMix(mix) and no WeightMixProblem(config, mix).
daemon::model::Weights RandomWeightsInMix(const daemon::model::ModelConfig& config, const std::string& mix,
                                          uint64_t seed, int threads);

}  // namespace niels::bench
