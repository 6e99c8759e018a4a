#pragma once
// Test models of the Llama family as files: a Hugging Face directory and the GGUF file llama.cpp's
// converter would make of it, written from the same model::Weights, with a tiny byte-level BPE
// tokenizer shaped like the real ones (Llama 3's or Qwen's added tokens, split regex, chat template).
// Both are held as editable parts (JSON documents, tensor lists, metadata lists) so that a test can
// break one thing and write them.
//
// Failures throw std::runtime_error (GoogleTest reports them). Thread-safe (no shared state).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/formats/ggml_type.h"
#include "daemon/formats/gguf_writer.h"
#include "daemon/formats/safetensors.h"
#include "daemon/kernels/dtype.h"
#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::testing {

// Small members of the family: C 64, L 2, H 4, KV 2, F 128, T 64, V the tiny tokenizer's.
//   llama: D 16, llama3 rope scaling (original context 16, so every band turns within 64
//          positions), tied head;
//   qwen2: D 16, q/k/v biases, untied head, V padded 8 ids past the tokenizer (as Qwen pads);
//   qwen3: D 32 (H D = 128 != C), q/k norms, tied head.
daemon::model::ModelConfig TinyFamilyConfig(daemon::model::Architecture architecture);

// Random weights for `config` (q, k and v apart) with spread logits: RandomWeights with std 0.3.
daemon::model::Weights TinyFamilyWeights(const daemon::model::ModelConfig& config, uint64_t seed);

// The tiny tokenizer: 256 byte pieces, ~40 merged pieces, then the added tokens (llama:
// <|begin_of_text|>, <|end_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eom_id|>, <|eot_id|>;
// qwen: <|endoftext|>, <|im_start|>, <|im_end|> special, <think> not). Its size:
int64_t TinyFamilyTokenizerSize(daemon::model::Architecture architecture);
// The id of an added token's text. Throws when there is none.
int32_t TinyFamilyTokenId(daemon::model::Architecture architecture, const std::string& text);

// A tensor as a file stores it.
struct FileTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  std::string bytes;
};

// A Hugging Face directory in parts.
struct HfModelFiles {
  nlohmann::json config, generation_config, tokenizer, tokenizer_config;
  struct Tensor {
    FileTensor file;
    daemon::formats::SafetensorsDtype dtype;
  };
  std::vector<Tensor> tensors;  // transformers' names

  Tensor* Find(const std::string& name);
  // Writes config.json, generation_config.json (unless null), tokenizer.json, tokenizer_config.json
  // and model.safetensors, or `shards` > 1 files model-0000i-of-0000N.safetensors (tensors dealt
  // round-robin) with model.safetensors.index.json.
  void Write(const std::filesystem::path& dir, int shards = 1) const;
};

// `weights` of `config` as a Hugging Face directory, matrices in `dtype` (f32, f16 or bf16), 1-D
// tensors in f32.
HfModelFiles MakeHfModel(const daemon::model::ModelConfig& config, const daemon::model::Weights& weights,
                         daemon::kernels::Dtype dtype = daemon::kernels::Dtype::kF32);

// A GGUF file in parts.
struct GgufModelFiles {
  std::vector<std::pair<std::string, daemon::formats::GgufWriteValue>> metadata;
  struct Tensor {
    FileTensor file;
    daemon::formats::GgmlType type;
  };
  std::vector<Tensor> tensors;  // llama.cpp's names

  Tensor* Find(const std::string& name);
  void Set(const std::string& key, daemon::formats::GgufWriteValue value);  // replaces or appends
  void Remove(const std::string& key);
  void Write(const std::filesystem::path& path) const;
};

// `weights` of `config` as convert_hf_to_gguf.py writes them: llama's q and k rows interleaved per
// head and rope_freqs.weight for llama3 scaling; matrices in type_of(name) (default: `dtype`), 1-D
// tensors f32; the tokenizer as tokenizer.ggml.* ("gpt2", pre llama-bpe or qwen2) with the chat
// template and special ids. A block type needs rows that are whole blocks.
GgufModelFiles MakeGgufModel(const daemon::model::ModelConfig& config, const daemon::model::Weights& weights,
                             daemon::kernels::Dtype dtype = daemon::kernels::Dtype::kF32,
                             const std::function<std::optional<daemon::kernels::Dtype>(const std::string&)>& type_of = {});

// A SentencePiece vocabulary of `vocab_size` ids (at least 350) shaped as llama.cpp's converter
// writes Llama 2's: <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, "\u2581", a-z and 0-9, the
// pieces that merge to the words of the tiny BPE vocabulary (space as U+2581; earlier merges score
// higher), then filler pieces "\u2581w<n>". Throws when vocab_size is too small.
struct SentencePieceTokens {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // tokenizer.ggml.token_type values
};
SentencePieceTokens TinySentencePieceTokens(int64_t vocab_size);

// Replaces the tokenizer of `files` with `vocabulary` as tokenizer.ggml.model "llama": tokens,
// scores, token types, bos 1, eos 2, unknown 0, add_bos true, add_eos false and a Llama 2 chat
// template; no merges, no pre-tokenizer, no padding id.
void UseSentencePieceVocabulary(GgufModelFiles& files, const SentencePieceTokens& vocabulary);

// The bytes of `tensor`'s values in `dtype` (rounded to nearest even, or quantized as ggml's
// reference quantizer does).
std::string TensorBytes(const daemon::model::Tensor& tensor, daemon::kernels::Dtype dtype);

}  // namespace niels::testing
