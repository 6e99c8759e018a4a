#pragma once
// ModelConfig: the hyperparameters of a model of the Llama family (niels_gpt among them), and the
// niels model directory's config.json (the other formats' configs are read by their loaders).

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/kernels/dtype.h"

namespace niels::daemon::model {

// Which family member a model is. The forward pass is one for all of them; the architecture
// decides the flags below (and the loaders which tensor names a file uses).
enum class Architecture : uint8_t {
  kNielsGpt,  // niels_gpt: adjacent-pair RoPE, fused qkv, biased SwiGLU, tied head
  kLlama,     // LlamaForCausalLM (Llama 3.x, Mistral-style configs, SmolLM2)
  kQwen2,     // Qwen2ForCausalLM: q/k/v biases
  kQwen3,     // Qwen3ForCausalLM: RMSNorm over each head of q and k
};
// "niels_gpt", "llama", "qwen2", "qwen3".
std::string_view ArchitectureName(Architecture architecture);

// Which elements RoPE rotates together in a head of D: (x[2i], x[2i+1]) (niels_gpt), or (x[i],
// x[i + D/2]) (Hugging Face's rotate_half, llama.cpp's NEOX style: Llama and Qwen).
enum class RopePairs : uint8_t { kAdjacent, kHalves };

// RoPE frequency scaling (Hugging Face's rope_scaling; GGUF llama's rope_freqs).
struct RopeScaling {
  enum class Type : uint8_t { kNone, kLlama3 };
  Type type = Type::kNone;
  // llama3: frequencies whose wavelength exceeds original_context / low_freq_factor are divided by
  // `factor`, those below original_context / high_freq_factor kept, the ones between blended.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

// The hyperparameters of a model of the family (docs/ARCHITECTURE.md, "Model math"). The defaults
// of the flags are niels_gpt's, which a niels config.json does not spell out.
struct ModelConfig {
  Architecture architecture = Architecture::kNielsGpt;
  int64_t vocab_size = 0;   // V: rows of tok_emb, columns of the logits ("V")
  int64_t context = 0;      // T: max positions, 0..T-1 ("T")
  int64_t width = 0;        // C: residual stream width ("C")
  int64_t layers = 0;       // L: transformer blocks ("L")
  int64_t heads = 0;        // H: query heads ("H")
  int64_t d_ff = 0;         // F: SwiGLU hidden width ("d_ff")
  double rope_theta = 10000.0;  // RoPE base ("rope_theta")
  double rms_norm_eps = 1e-5;   // RMSNorm's epsilon (niels_gpt's; not in a niels config.json)
  std::string name;         // optional display name ("name"); empty when absent
  // Grouped-query attention: KV key/value heads, H a multiple of KV; query head h reads key/value
  // head h / (H / KV). 0 means H (multi-head attention, niels_gpt).
  int64_t kv_heads = 0;
  // D, the width of a head; 0 means C / H (niels_gpt). Qwen3 sets it apart: H * D need not be C.
  int64_t head_size = 0;
  RopePairs rope_pairs = RopePairs::kAdjacent;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q, k and v projections have biases (Qwen2)
  bool qk_norm = false;         // RMSNorm over each head of q and of k before RoPE (Qwen3)
  bool mlp_bias = true;         // gate, up and down projections have biases (niels_gpt)
  bool tied_embeddings = true;  // the output projection is tok_emb
  // The q and k projections' rows are stored in llama.cpp's order for its llama architecture (the
  // halves of each head interleaved: stored row 2i is row i, 2i+1 is row D/2 + i): the forward pass
  // puts every head of q and k back in Hugging Face's order after the projection, so that a GGUF
  // and the HF directory it came from compute bitwise the same. A property of the weights' layout.
  bool qk_rows_interleaved = false;

  int64_t head_dim() const { return head_size > 0 ? head_size : width / heads; }  // D
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }        // KV
  int64_t q_width() const { return heads * head_dim(); }                           // H D
  int64_t kv_width() const { return kv_head_count() * head_dim(); }                // KV D
};

// INVALID_ARGUMENT naming the first inconsistency (`where`: the file or source, for the message):
// a non-positive size, H not a multiple of KV, an odd head dim, C not divisible by H when D is
// implied, rope scaling factors out of range, sizes past the limits a file may claim.
common::Status ValidateModelConfig(const ModelConfig& config, const std::string& where);

// Parses a niels config.json. Unknown keys (and "dropout") are ignored.
// Errors (INVALID_ARGUMENT, message names `file_name` and the key): invalid JSON, a missing or
// non-integer key, a non-positive value, C not divisible by H, an odd head dim.
common::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& file_name);

// Reads and parses a file. NOT_FOUND when it cannot be read.
common::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path);

// The config as config.json text (keys V,T,C,L,H,d_ff,rope_theta,name).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace niels::daemon::model
