// Fuzz target: the loaders of the Llama family (daemon/loaders): a GGUF model file through LoadModel
// (gguf_config, gguf_tokenizer, gguf_sentencepiece, gguf_model: metadata to config, tokenizer.ggml.*
// to a byte-level BPE or a SentencePiece tokenizer, tensors to weights) and the text of a Hugging Face config.json (hf_config.h,
// ParseHfConfig) and generation_config.json (ParseGenerationConfigEos).
//
// Input: 1 selector byte, then the fuzzed bytes. selector % 3: 0 = a GGUF file (written to tmpfs
// when /dev/shm exists, loaded with --max-context 64), 1 = config.json, 2 = generation_config.json.
// The seeds are tiny llama, qwen2 and qwen3 models (family_model.h, at shapes whose GGUF fits in one
// input), a qwen2 with q8_0 and a llama with q5_0 matrices, a llama with a SentencePiece vocabulary ("llama_spm") and their config.json files; with NIELS_FUZZ_WRITE_SEEDS=DIR the initialisation writes
// them to DIR.
// Invariants: a refused GGUF names the file; a loaded one has a config that ValidateModelConfig
// accepts and that is of the family, a tokenizer of V ids, stop ids in range, ascending and not
// empty, an add-BOS id in range, a tokenizer that encodes (plain and rendered) to ids in range,
// every matrix of the file's own types, and runs one forward pass of two tokens (V logits per position; finiteness is not checked: the weights are the input's). An
// accepted config.json gives a valid config of llama, qwen2 or qwen3, llama3 rope scaling with
// positive factors, ids >= 0.

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/loaders/hf_config.h"
#include "daemon/loaders/model_loader.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/family_model.h"
#include "tests/support/temp_files.h"

namespace fs = std::filesystem;
namespace model = niels::daemon::model;
namespace loaders = niels::daemon::loaders;

namespace {

fs::path g_work;

fs::path MakeWorkDir() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) {
    std::string pattern = "/dev/shm/niels_family_model_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) return pattern;
  }
  return niels::testing::MakeTempDir("niels_family_model_fuzz_");
}

struct RemoveWorkDirAtExit {
  ~RemoveWorkDirAtExit() {
    std::error_code ec;
    fs::remove_all(g_work, ec);
  }
};

// A member at the smallest shapes: its GGUF (f16 matrices) is ~30 KB.
model::ModelConfig SeedConfig(model::Architecture architecture) {
  model::ModelConfig c = niels::testing::TinyFamilyConfig(architecture);
  c.width = 16;
  c.layers = 1;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_size = 8;
  c.d_ff = 32;
  c.context = 64;
  return c;
}

void WriteSeeds(const fs::path& dir) {
  fs::create_directories(dir);
  for (model::Architecture a : {model::Architecture::kLlama, model::Architecture::kQwen2, model::Architecture::kQwen3}) {
    const model::ModelConfig config = SeedConfig(a);
    const model::Weights weights = niels::testing::TinyFamilyWeights(config, 1);
    const std::string name(model::ArchitectureName(a));
    const fs::path gguf = g_work / (name + ".gguf");
    niels::testing::MakeGgufModel(config, weights, niels::daemon::kernels::Dtype::kF16).Write(gguf);
    FUZZ_CHECK(loaders::LoadModel(gguf).ok());
    niels::testing::WriteFile(dir / (name + "_gguf"), std::string(1, '\0') + niels::testing::ReadFile(gguf));
    const niels::testing::HfModelFiles hf = niels::testing::MakeHfModel(config, weights);
    niels::testing::WriteFile(dir / (name + "_config_json"), std::string(1, '\1') + hf.config.dump(2));
    niels::testing::WriteFile(dir / (name + "_generation_config_json"), std::string(1, '\2') + hf.generation_config.dump(2));
  }
  // Block-type matrices, as a quantized file holds them (rows of 32: a wider member): q8_0, and
  // q5_0 (q4_k_m's type for rows that are not whole 256-blocks).
  for (const auto& [a, dtype] : {std::pair{model::Architecture::kQwen2, niels::daemon::kernels::Dtype::kQ8_0},
                                 std::pair{model::Architecture::kLlama, niels::daemon::kernels::Dtype::kQ5_0}}) {
    model::ModelConfig config = SeedConfig(a);
    config.width = 32;
    config.head_size = 16;
    const std::string name = std::string(model::ArchitectureName(a)) + "_" +
                             std::string(niels::daemon::kernels::DtypeName(dtype));
    const fs::path gguf = g_work / (name + ".gguf");
    niels::testing::MakeGgufModel(config, niels::testing::TinyFamilyWeights(config, 1), dtype).Write(gguf);
    FUZZ_CHECK(loaders::LoadModel(gguf).ok());
    niels::testing::WriteFile(dir / (name + "_gguf"), std::string(1, '\0') + niels::testing::ReadFile(gguf));
  }
  // A SentencePiece vocabulary (tokenizer.ggml.model "llama", Llama 2's shape).
  model::ModelConfig config = SeedConfig(model::Architecture::kLlama);
  config.vocab_size = 352;
  niels::testing::GgufModelFiles spm =
      niels::testing::MakeGgufModel(config, niels::testing::TinyFamilyWeights(config, 1), niels::daemon::kernels::Dtype::kF16);
  niels::testing::UseSentencePieceVocabulary(spm, niels::testing::TinySentencePieceTokens(config.vocab_size));
  const fs::path gguf = g_work / "llama_spm.gguf";
  spm.Write(gguf);
  FUZZ_CHECK(loaders::LoadModel(gguf).ok());
  niels::testing::WriteFile(dir / "llama_spm_gguf", std::string(1, '\0') + niels::testing::ReadFile(gguf));
}

void CheckGguf(std::string_view bytes) {
  const fs::path path = g_work / "model.gguf";
  niels::testing::WriteFile(path, bytes);
  loaders::LoadOptions options;
  options.max_context = 64;
  auto loaded = loaders::LoadModel(path, nullptr, options);
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().message().find(path.string()) != std::string::npos);
    return;
  }
  const loaders::Model& m = **loaded;
  const model::ModelConfig& c = m.config;
  FUZZ_CHECK(model::ValidateModelConfig(c, "fuzz").ok());
  FUZZ_CHECK(c.architecture != model::Architecture::kNielsGpt && c.context <= 64);
  FUZZ_CHECK(m.tokenizer->vocab_size() == c.vocab_size);
  FUZZ_CHECK(!m.stop_ids.empty());
  for (size_t i = 0; i < m.stop_ids.size(); ++i) {
    FUZZ_CHECK(m.stop_ids[i] >= 0 && m.stop_ids[i] < c.vocab_size);
    FUZZ_CHECK(i == 0 || m.stop_ids[i - 1] < m.stop_ids[i]);
  }
  FUZZ_CHECK(!m.add_bos_id || (*m.add_bos_id >= 0 && *m.add_bos_id < c.vocab_size));
  for (std::string_view text : {"Hello <s> w\xC3\xB6rld\n\t  \xF0\x9F\x98\x80 </s><unk>", ""}) {
    for (bool rendered : {false, true}) {
      auto ids = rendered ? m.tokenizer->EncodeRendered(text) : m.tokenizer->Encode(text);
      if (!ids.ok()) continue;
      for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < c.vocab_size);
      (void)m.tokenizer->Decode(*ids);
    }
  }
  const std::vector<int32_t> ids{m.stop_ids.front(), 0};
  FUZZ_CHECK(m.transformer->Forward(ids).size() == 2 * static_cast<size_t>(c.vocab_size));
}

void CheckConfig(std::string_view text) {
  auto parsed = loaders::ParseHfConfig(text, "config.json");
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().message().find("config.json") != std::string::npos);
    return;
  }
  const model::ModelConfig& c = parsed->config;
  FUZZ_CHECK(model::ValidateModelConfig(c, "fuzz").ok());
  FUZZ_CHECK(c.architecture != model::Architecture::kNielsGpt);
  if (c.rope_scaling.type == model::RopeScaling::Type::kLlama3) {
    FUZZ_CHECK(c.rope_scaling.factor > 0 && c.rope_scaling.low_freq_factor > 0 &&
               c.rope_scaling.high_freq_factor > 0 && c.rope_scaling.original_context > 0);
  }
  FUZZ_CHECK(!parsed->bos_id || *parsed->bos_id >= 0);
  for (int32_t id : parsed->eos_ids) FUZZ_CHECK(id >= 0);
}

void CheckGenerationConfig(std::string_view text) {
  auto eos = loaders::ParseGenerationConfigEos(text, "generation_config.json");
  if (!eos.ok()) {
    FUZZ_CHECK(eos.status().message().find("generation_config.json") != std::string::npos);
    return;
  }
  for (int32_t id : *eos) FUZZ_CHECK(id >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_work = MakeWorkDir();
  static RemoveWorkDirAtExit remove_work_dir_at_exit;
  if (const char* seeds = std::getenv("NIELS_FUZZ_WRITE_SEEDS")) WriteSeeds(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const int selector = in.U8() % 3;
  const std::string_view rest = in.Rest();
  switch (selector) {
    case 0: CheckGguf(rest); break;
    case 1: CheckConfig(rest); break;
    default: CheckGenerationConfig(rest); break;
  }
  return 0;
}
