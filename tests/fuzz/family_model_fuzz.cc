// Fuzz target: the loaders of the Llama family (daemon/loaders): a GGUF model file through LoadModel
// (gguf_config, gguf_tokenizer, gguf_sentencepiece, gguf_model: metadata to config, tokenizer.ggml.*
// to a byte-level BPE or a SentencePiece tokenizer, tensors to weights) and the text of a Hugging Face config.json (hf_config.h,
// ParseHfConfig) and generation_config.json (ParseGenerationConfigEos).
//
// Input: 1 selector byte, then the fuzzed bytes. selector % 3: 0 = a GGUF file (written to tmpfs
// when /dev/shm exists, loaded with --max-context 64), 1 = config.json, 2 = generation_config.json.
// The seeds are tiny llama, qwen2 and qwen3 models (family_model.h, at shapes whose GGUF fits in one
// input), a qwen2 with q8_0, a llama with q5_0 and a qwen3 with q4_0 matrices, a llama with q4_k, a
// qwen3 with q5_k and a llama with q6_k ones (attn_output and ffn_down: see WriteSeeds), a llama
// with a SentencePiece vocabulary ("llama_spm") and their config.json files; with
// NIELS_FUZZ_WRITE_SEEDS=DIR the initialisation writes them to DIR (every seed within -max_len).
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
// scripts/fuzz.sh's -max_len: a longer seed would be cut to this.
constexpr size_t kMaxInputBytes = 65536;

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
  // Block-type matrices, as a quantized file holds them. Rows of 32 (a wider member): every matrix
  // in q8_0, q5_0 (q4_k_m's type for rows that are not whole 256-blocks) or q4_0. The k-quants need
  // rows of whole 256-blocks: at width 32, only attn_output (rows of heads x head size = 4 x 64)
  // and ffn_down (rows of d_ff = 256) have them; those are in the k-quant, every other matrix in
  // the type llama.cpp's quantizer falls back to for such rows (q4_k: q5_0, q6_k: q8_0; q5_k: q5_0,
  // as nielsd reads no q5_1).
  using niels::daemon::kernels::Dtype;
  struct BlockSeed {
    model::Architecture architecture;
    Dtype whole_blocks;  // the type of the matrices whose rows are whole blocks of it
    Dtype others;        // the type of the other matrices
  };
  for (const BlockSeed& s : {BlockSeed{model::Architecture::kQwen2, Dtype::kQ8_0, Dtype::kQ8_0},
                             BlockSeed{model::Architecture::kLlama, Dtype::kQ5_0, Dtype::kQ5_0},
                             BlockSeed{model::Architecture::kQwen3, Dtype::kQ4_0, Dtype::kQ4_0},
                             BlockSeed{model::Architecture::kLlama, Dtype::kQ4_K, Dtype::kQ5_0},
                             BlockSeed{model::Architecture::kQwen3, Dtype::kQ5_K, Dtype::kQ5_0},
                             BlockSeed{model::Architecture::kLlama, Dtype::kQ6_K, Dtype::kQ8_0}}) {
    model::ModelConfig config = SeedConfig(s.architecture);
    config.width = 32;
    config.head_size = 16;
    const bool k_quant = niels::daemon::kernels::DtypeBlockElements(s.whole_blocks) == 256;
    if (k_quant) {
      config.heads = 4;
      config.head_size = 64;
      config.d_ff = 256;
    }
    const std::string name = std::string(model::ArchitectureName(s.architecture)) + "_" +
                             std::string(niels::daemon::kernels::DtypeName(s.whole_blocks));
    niels::testing::GgufModelFiles files = niels::testing::MakeGgufModel(
        config, niels::testing::TinyFamilyWeights(config, 1), s.others, [&](const std::string& gguf_name) {
          const bool whole = !k_quant || gguf_name.ends_with(".attn_output.weight") || gguf_name.ends_with(".ffn_down.weight");
          return whole ? s.whole_blocks : s.others;
        });
    const fs::path gguf = g_work / (name + ".gguf");
    files.Write(gguf);
    FUZZ_CHECK(loaders::LoadModel(gguf).ok());
    const std::string bytes = std::string(1, '\0') + niels::testing::ReadFile(gguf);
    FUZZ_CHECK(bytes.size() <= kMaxInputBytes);  // else libFuzzer would cut the seed
    niels::testing::WriteFile(dir / (name + "_gguf"), bytes);
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
