#pragma once
// ModelConfig: the hyperparameters of a niels_gpt model, read from a model directory's config.json.
// No libtorch here: the server and tools can read a config without the model.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/kernels/dtype.h"

namespace niels::daemon::model {

struct ModelConfig {
  int64_t vocab_size = 0;   // V: rows of tok_emb, columns of the logits ("V")
  int64_t context = 0;      // T: max positions, 0..T-1 ("T")
  int64_t width = 0;        // C: residual stream width ("C")
  int64_t layers = 0;       // L: transformer blocks ("L")
  int64_t heads = 0;        // H: attention heads; C % H == 0 and C/H even ("H")
  int64_t d_ff = 0;         // SwiGLU hidden width ("d_ff")
  double rope_theta = 10000.0;  // RoPE base ("rope_theta")
  double rms_norm_eps = 1e-5;   // RMSNorm's epsilon (niels_gpt's; not in a niels config.json)
  std::string name;         // optional display name ("name"); empty when absent

  int64_t head_dim() const { return width / heads; }  // D
};

// Parses config.json text. Unknown keys (and "dropout") are ignored.
// Errors (INVALID_ARGUMENT, message names `file_name` and the key): invalid JSON, a missing or
// non-integer key, a non-positive value, C not divisible by H, an odd head dim.
common::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& file_name);

// Reads and parses a file. NOT_FOUND when it cannot be read.
common::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path);

// The config as config.json text (keys V,T,C,L,H,d_ff,rope_theta,name).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace niels::daemon::model
