// Fuzz target: the whole model-directory loader (daemon/model/model_dir.h, LoadModelDir):
// config.json, model.safetensors and tokenizer.model together, including their cross-checks and
// our own reading of the SentencePiece model proto (retyping the special pieces).
//
// Input: 1 selector byte, then the fuzzed file(s). selector % 4: 0 = config.json, 1 =
// model.safetensors, 2 = tokenizer.model is the rest of the input (the other files come from a
// valid tiny model directory); 3 = all three, each preceded by a 32-bit little-endian length.
// The files are written to a fresh directory per input.
// Invariants: a load either fails with a message naming a file or yields a model whose config,
// tokenizer and weights agree (V = pieces = tok_emb rows), whose special tokens are distinct
// pieces, and which runs one forward pass (weights are not checked for finiteness; NaN logits are
// the sampler's concern).

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "daemon/model/model_dir.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/test_model.h"

namespace fs = std::filesystem;
namespace model = niels::daemon::model;

namespace {

struct Valid {
  std::string config, weights, tokenizer;
};
const Valid* g_valid = nullptr;
fs::path g_work;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static niels::testing::TempDir dir("niels_model_dir_fuzz_");
  niels::testing::WriteModelDir(dir / "valid", niels::testing::TinyConfig(), 3);
  g_valid = new Valid{niels::testing::ReadFile(dir / "valid/config.json"),
                      niels::testing::ReadFile(dir / "valid/model.safetensors"),
                      niels::testing::ReadFile(dir / "valid/tokenizer.model")};
  g_work = dir / "work";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  Valid files = *g_valid;
  switch (in.U8() % 4) {
    case 0: files.config = in.Rest(); break;
    case 1: files.weights = in.Rest(); break;
    case 2: files.tokenizer = in.Rest(); break;
    default:
      files.config = in.Bytes(in.U32());
      files.weights = in.Bytes(in.U32());
      files.tokenizer = in.Bytes(in.U32());
  }
  std::error_code ec;
  fs::remove_all(g_work, ec);
  fs::create_directories(g_work);
  niels::testing::WriteFile(g_work / "config.json", files.config);
  niels::testing::WriteFile(g_work / "model.safetensors", files.weights);
  niels::testing::WriteFile(g_work / "tokenizer.model", files.tokenizer);

  auto loaded = model::LoadModelDir(g_work);
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().message().find(g_work.string()) != std::string::npos);
    return 0;
  }
  const model::Model& m = **loaded;
  FUZZ_CHECK(m.tokenizer->vocab_size() == m.config.vocab_size);
  const model::SpecialTokens& s = m.tokenizer->special();
  FUZZ_CHECK(s.sys >= 0 && s.usr >= 0 && s.asst >= 0 && s.eot >= 0);
  FUZZ_CHECK(s.sys != s.usr && s.sys != s.asst && s.sys != s.eot && s.usr != s.asst && s.usr != s.eot &&
             s.asst != s.eot);
  // Small enough to run: one forward pass over two tokens.
  if (m.config.width * m.config.layers * m.config.d_ff <= (int64_t{1} << 22) && m.config.context >= 2) {
    const std::vector<int32_t> ids = {s.sys, s.usr};
    const torch::Tensor logits = m.transformer->Forward(ids);
    FUZZ_CHECK(logits.size(-1) == m.config.vocab_size);
  }
  return 0;
}
