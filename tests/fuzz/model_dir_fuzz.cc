// Fuzz target: the whole model-directory loader (daemon/loaders/model_loader.h, LoadModelDir):
// config.json, model.safetensors and tokenizer.model together, including their cross-checks and
// our own reading of the SentencePiece model proto (retyping the special pieces).
//
// Input: 1 selector byte, then the fuzzed file(s). selector % 4: 0 = config.json, 1 =
// model.safetensors, 2 = tokenizer.model is the rest of the input (the other files come from a
// valid tiny model directory); 3 = all three, each preceded by a 32-bit little-endian length.
// The directory lives on tmpfs when /dev/shm exists, and only the files that differ from the valid
// ones are rewritten per input. The valid model is as small as the loader allows (V from the
// tokenizer, T 16, C 8, L 1, H 2, d_ff 16: the whole directory fits in one input), and its
// tokenizer uses SentencePiece's identity normalization: without the 240 KB NFKC map in every
// tokenizer.model load a run is several times faster (the seeds still include the shipped
// tokenizer, NFKC map and all). With NIELS_FUZZ_WRITE_SEEDS=DIR the initialisation also writes the
// valid directory as seeds (valid_tokenizer, valid_all_three) to DIR.
// Invariants: a load either fails with a message naming a file or yields a model whose config,
// tokenizer and weights agree (V = pieces = tok_emb rows), whose special tokens are distinct
// pieces, and which runs one forward pass (weights are not checked for finiteness; NaN logits are
// the sampler's concern).

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/model/weights.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/test_model.h"

namespace fs = std::filesystem;
namespace model = niels::daemon::model;
namespace text = niels::daemon::text;
namespace loaders = niels::daemon::loaders;

namespace {

constexpr const char* kNames[3] = {"config.json", "model.safetensors", "tokenizer.model"};

// The valid files, and which of them the work directory currently holds something else for.
std::string g_valid[3];
bool g_dirty[3] = {false, false, false};
fs::path g_work;

// A fresh directory on tmpfs if there is one. RemoveWorkDirAtExit removes it.
fs::path MakeWorkDir() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) {
    std::string pattern = "/dev/shm/niels_model_dir_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) return pattern;
  }
  return niels::testing::MakeTempDir("niels_model_dir_fuzz_");
}

void WriteSeed(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  niels::testing::WriteFile(dir / name, bytes);
}

std::string LengthPrefixed(const std::string& bytes) {
  const auto n = static_cast<uint32_t>(bytes.size());
  const char prefix[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 24)};
  return std::string(prefix, 4) + bytes;
}

// Removes g_work when the process exits normally (a timed campaign, the replay ctest). A campaign
// stopped by a signal ends without destructors and leaves its directory behind.
struct RemoveWorkDirAtExit {
  ~RemoveWorkDirAtExit() {
    std::error_code ec;
    fs::remove_all(g_work, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_work = MakeWorkDir();
  static RemoveWorkDirAtExit remove_work_dir_at_exit;
  niels::testing::TinyTokenizerOptions options;
  options.normalization = "identity";
  niels::testing::TrainTinyTokenizer(g_work / kNames[2], options);
  auto tokenizer = text::SentencePieceTokenizer::Load(g_work / kNames[2]);
  FUZZ_CHECK(tokenizer.ok());
  // The smallest shapes the loader accepts with this tokenizer, so that a whole valid directory
  // (about 23 KB) fits in one fuzz input (-max_len 65536) and a forward pass is cheap.
  model::ModelConfig config = niels::testing::TinyConfig();
  config.vocab_size = (*tokenizer)->vocab_size();
  config.context = 16;
  config.width = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 16;
  niels::testing::WriteFile(g_work / kNames[0], model::ModelConfigToJson(config));
  FUZZ_CHECK(loaders::SaveNielsWeights(model::RandomWeights(config, 3), g_work / kNames[1]).ok());
  for (int i = 0; i < 3; ++i) g_valid[i] = niels::testing::ReadFile(g_work / kNames[i]);
  FUZZ_CHECK(loaders::LoadModel(g_work).ok());
  if (const char* seeds = std::getenv("NIELS_FUZZ_WRITE_SEEDS")) {
    WriteSeed(seeds, "valid_tokenizer", "\x02" + g_valid[2]);
    WriteSeed(seeds, "valid_all_three",
              "\x03" + LengthPrefixed(g_valid[0]) + LengthPrefixed(g_valid[1]) + LengthPrefixed(g_valid[2]));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  std::string_view fuzzed[3];
  bool given[3] = {false, false, false};
  const int selector = in.U8() % 4;
  if (selector < 3) {
    fuzzed[selector] = in.Rest();
    given[selector] = true;
  } else {
    for (int i = 0; i < 3; ++i) {
      fuzzed[i] = in.Bytes(in.U32());
      given[i] = true;
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (given[i]) {
      niels::testing::WriteFile(g_work / kNames[i], fuzzed[i]);
      g_dirty[i] = true;
    } else if (g_dirty[i]) {
      niels::testing::WriteFile(g_work / kNames[i], g_valid[i]);
      g_dirty[i] = false;
    }
  }

  auto loaded = loaders::LoadModel(g_work);
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().message().find(g_work.string()) != std::string::npos);
    return 0;
  }
  const loaders::Model& m = **loaded;
  FUZZ_CHECK(m.tokenizer->vocab_size() == m.config.vocab_size);
  const text::SpecialTokens& s = m.special;
  FUZZ_CHECK(s.sys >= 0 && s.usr >= 0 && s.asst >= 0 && s.eot >= 0);
  FUZZ_CHECK(s.sys != s.usr && s.sys != s.asst && s.sys != s.eot && s.usr != s.asst && s.usr != s.eot &&
             s.asst != s.eot);
  // Small enough to run: one forward pass over two tokens.
  if (m.config.width * m.config.layers * m.config.d_ff <= (int64_t{1} << 22) && m.config.context >= 2) {
    const std::vector<int32_t> ids = {s.sys, s.usr};
    const std::vector<float> logits = m.transformer->Forward(ids);
    FUZZ_CHECK(static_cast<int64_t>(logits.size()) == 2 * m.config.vocab_size);
  }
  return 0;
}
