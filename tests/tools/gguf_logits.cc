// niels_gguf_logits: nielsd's teacher-forced logits on a GGUF file of the llama, qwen2 or qwen3
// architecture (f32/f16/bf16 or quantized by niels-quantize), for quantize_reference_test.py.
//
//   niels_gguf_logits GGUF PROMPTS.json OUT.bin [--dequantize]
//
// PROMPTS: [[token ids], ...]. OUT: for every position of every prompt in order, one row of V
// float32 (little-endian) = logit - max(logit) -- the layout of llamacpp_reference.mjs's
// logits_file, so the two compare row by row. --dequantize: the block-type matrices widened to f32
// first (model::Tensor::ToFloats), so the products are float ones on the exact dequantized weights
// (no 8-bit activations). One thread. Exit status 0, 1 with the reason on stderr.
//
// The model runs on nielsd's own forward pass, its weights read straight from the file's mapping in
// the file's types (gguf_test_model.h: a test harness, not a loader). A tensor type nielsd has no
// kernel for (q5_0, q5_1, ...) is an error naming it.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tests/tools/gguf_test_model.h"

namespace {

using niels::common::Status;

// The positions the test's prompts need; the files' context_length may be 128k.
constexpr int64_t kContext = 256;

int Fail(const Status& status) {
  std::fprintf(stderr, "niels_gguf_logits: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool dequantize = argc == 5 && std::string(argv[4]) == "--dequantize";
  if (argc != 4 && !dequantize) {
    std::fprintf(stderr, "usage: %s GGUF PROMPTS.json OUT.bin [--dequantize]\n", argv[0]);
    return 1;
  }
  auto loaded = niels::testing::LoadGgufTestModel(argv[1], kContext, dequantize);
  if (!loaded.ok()) return Fail(loaded.status());
  const niels::daemon::model::ModelConfig* config = &loaded->config;
  const niels::daemon::model::Transformer& transformer = *loaded->transformer;
  std::ifstream prompts_in(argv[2]);
  const nlohmann::json prompts = nlohmann::json::parse(prompts_in, nullptr, /*allow_exceptions=*/false);
  if (!prompts.is_array()) return Fail(Status::InvalidArgument(std::string(argv[2]) + ": not a JSON array"));
  std::ofstream out(argv[3], std::ios::binary | std::ios::trunc);
  const int64_t V = config->vocab_size;
  for (const nlohmann::json& prompt : prompts) {
    const std::vector<int32_t> tokens = prompt.get<std::vector<int32_t>>();
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) > kContext) {
      return Fail(Status::InvalidArgument("a prompt of 1.." + std::to_string(kContext) + " tokens expected"));
    }
    for (int32_t t : tokens) {
      if (t < 0 || t >= V) return Fail(Status::InvalidArgument("token " + std::to_string(t) + " out of range"));
    }
    std::vector<float> logits = transformer.Forward(tokens);  // [tokens, V]
    for (size_t r = 0; r < tokens.size(); ++r) {
      float* row = logits.data() + r * V;
      float top = row[0];
      for (int64_t j = 1; j < V; ++j) top = std::max(top, row[j]);
      for (int64_t j = 0; j < V; ++j) row[j] -= top;
    }
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
  }
  out.close();
  if (!out) return Fail(Status::Internal(std::string(argv[3]) + ": write failed"));
  return 0;
}
