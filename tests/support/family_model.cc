#include "tests/support/family_model.h"

#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/text/bpe_spec.h"
#include "daemon/text/byte_level.h"

namespace niels::testing {
namespace {

using daemon::formats::GgmlType;
using daemon::formats::GgufValueType;
using daemon::formats::GgufWriteValue;
using daemon::formats::SafetensorsDtype;
using daemon::kernels::Dtype;
using daemon::model::Architecture;
using daemon::model::ModelConfig;
using daemon::model::Weights;
using json = nlohmann::json;

bool IsLlama(Architecture a) { return a == Architecture::kLlama; }

std::string Spell(std::string_view bytes) {
  std::string out;
  daemon::text::AppendByteLevel(bytes, &out);
  return out;
}

// Words whose pieces the merges build, left to right.
const std::vector<std::string>& MergedWords() {
  static const std::vector<std::string> words = {" the", " and", "ing", " to", " of", "er", " a", "in", " is",
                                                 "on", " model", " token", "ed", " it", " you", "ll", "12", "\n\n"};
  return words;
}

struct TinyVocab {
  std::vector<std::string> pieces;  // byte-level spelling, ids 0..
  std::vector<std::pair<std::string, std::string>> merges;
};

const TinyVocab& Vocab() {
  static const TinyVocab vocab = [] {
    TinyVocab v;
    std::map<std::string, int> ids;
    for (int b = 0; b < 256; ++b) {
      v.pieces.push_back(Spell(std::string(1, static_cast<char>(b))));
      ids[v.pieces.back()] = b;
    }
    for (const std::string& word : MergedWords()) {
      std::string left = Spell(word.substr(0, 1));
      for (size_t i = 1; i < word.size(); ++i) {
        const std::string right = Spell(word.substr(i, 1));
        if (!ids.count(left + right)) {
          v.merges.emplace_back(left, right);
          ids[left + right] = static_cast<int>(v.pieces.size());
          v.pieces.push_back(left + right);
        }
        left += right;
      }
    }
    return v;
  }();
  return vocab;
}

struct AddedToken {
  std::string text;
  bool special;
};

std::vector<AddedToken> AddedTokens(Architecture a) {
  if (IsLlama(a)) {
    return {{"<|begin_of_text|>", true}, {"<|end_of_text|>", true}, {"<|start_header_id|>", true},
            {"<|end_header_id|>", true}, {"<|eom_id|>", true},      {"<|eot_id|>", true}};
  }
  return {{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<think>", false}};
}

const char* kLlamaTemplate =
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";
const char* kQwenTemplate =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

json TokenizerJson(Architecture a) {
  const TinyVocab& v = Vocab();
  json vocab = json::object();
  for (size_t i = 0; i < v.pieces.size(); ++i) vocab[v.pieces[i]] = i;
  json merges = json::array();
  for (const auto& [l, r] : v.merges) merges.push_back(json::array({l, r}));
  json added = json::array();
  int64_t id = static_cast<int64_t>(v.pieces.size());
  for (const AddedToken& t : AddedTokens(a)) {
    added.push_back({{"id", id++}, {"content", t.text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", t.special}});
  }
  const bool llama = IsLlama(a);
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern",
                  {{"Regex", std::string(llama ? daemon::text::kLlama3SplitPattern : daemon::text::kQwen2SplitPattern)}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  json post = llama ? json{{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}
                    : json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                           {"use_regex", false}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", llama ? json(nullptr) : json{{"type", "NFC"}}},
          {"pre_tokenizer", pre},
          {"post_processor", post},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", llama},
            {"byte_fallback", false}, {"fuse_unk", false}, {"vocab", vocab}, {"merges", merges}}}};
}

json TokenizerConfigJson(Architecture a) {
  if (IsLlama(a)) {
    return {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}, {"chat_template", kLlamaTemplate}};
  }
  return {{"add_bos_token", false}, {"bos_token", nullptr}, {"eos_token", "<|im_end|>"},
          {"pad_token", "<|endoftext|>"}, {"chat_template", kQwenTemplate}};
}

std::vector<int32_t> EosIds(Architecture a) {
  if (IsLlama(a)) {
    return {TinyFamilyTokenId(a, "<|end_of_text|>"), TinyFamilyTokenId(a, "<|eom_id|>"),
            TinyFamilyTokenId(a, "<|eot_id|>")};
  }
  return {TinyFamilyTokenId(a, "<|im_end|>"), TinyFamilyTokenId(a, "<|endoftext|>")};
}

const char* HfArchitecture(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
    default: throw std::runtime_error("no Hugging Face architecture for niels_gpt");
  }
}

json ConfigJson(const ModelConfig& c) {
  const Architecture a = c.architecture;
  json j = {{"architectures", {HfArchitecture(a)}},
            {"model_type", std::string(daemon::model::ArchitectureName(a))},
            {"hidden_act", "silu"},
            {"hidden_size", c.width},
            {"intermediate_size", c.d_ff},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_head_count()},
            {"max_position_embeddings", c.context},
            {"vocab_size", c.vocab_size},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tied_embeddings},
            {"torch_dtype", "float32"},
            {"bos_token_id", IsLlama(a) ? TinyFamilyTokenId(a, "<|begin_of_text|>") : TinyFamilyTokenId(a, "<|endoftext|>")},
            {"eos_token_id", IsLlama(a) ? json(EosIds(a)) : json(TinyFamilyTokenId(a, "<|im_end|>"))}};
  if (c.head_size > 0) j["head_dim"] = c.head_size;
  if (a == Architecture::kLlama) {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
    if (c.rope_scaling.type == daemon::model::RopeScaling::Type::kLlama3) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_context}};
    } else {
      j["rope_scaling"] = nullptr;
    }
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["rope_scaling"] = nullptr;
    if (a == Architecture::kQwen3) j["attention_bias"] = c.attention_bias;
  }
  return j;
}

// transformers' name of each Weights slot.
std::string HfName(const std::string& ours) {
  static const std::map<std::string, std::string> block = {
      {"attn_norm", "input_layernorm.weight"},  {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},        {"wv", "self_attn.v_proj.weight"},
      {"bq", "self_attn.q_proj.bias"},          {"bk", "self_attn.k_proj.bias"},
      {"bv", "self_attn.v_proj.bias"},          {"q_norm", "self_attn.q_norm.weight"},
      {"k_norm", "self_attn.k_norm.weight"},    {"wo", "self_attn.o_proj.weight"},
      {"ffn_norm", "post_attention_layernorm.weight"}, {"w_gate", "mlp.gate_proj.weight"},
      {"b_gate", "mlp.gate_proj.bias"},         {"w_up", "mlp.up_proj.weight"},
      {"b_up", "mlp.up_proj.bias"},             {"w_down", "mlp.down_proj.weight"},
      {"b_down", "mlp.down_proj.bias"}};
  if (ours == "tok_emb") return "model.embed_tokens.weight";
  if (ours == "final_norm") return "model.norm.weight";
  if (ours == "lm_head") return "lm_head.weight";
  const size_t dot = ours.find('.', 7);
  return "model.layers." + ours.substr(7, dot - 7) + "." + block.at(ours.substr(dot + 1));
}

std::string GgufName(const std::string& ours) {
  static const std::map<std::string, std::string> block = {
      {"attn_norm", "attn_norm.weight"}, {"wq", "attn_q.weight"},       {"wk", "attn_k.weight"},
      {"wv", "attn_v.weight"},           {"bq", "attn_q.bias"},         {"bk", "attn_k.bias"},
      {"bv", "attn_v.bias"},             {"q_norm", "attn_q_norm.weight"}, {"k_norm", "attn_k_norm.weight"},
      {"wo", "attn_output.weight"},      {"ffn_norm", "ffn_norm.weight"}, {"w_gate", "ffn_gate.weight"},
      {"b_gate", "ffn_gate.bias"},       {"w_up", "ffn_up.weight"},     {"b_up", "ffn_up.bias"},
      {"w_down", "ffn_down.weight"},     {"b_down", "ffn_down.bias"}};
  if (ours == "tok_emb") return "token_embd.weight";
  if (ours == "final_norm") return "output_norm.weight";
  if (ours == "lm_head") return "output.weight";
  if (ours == "rope_freqs") return "rope_freqs.weight";
  const size_t dot = ours.find('.', 7);
  return "blk." + ours.substr(7, dot - 7) + "." + block.at(ours.substr(dot + 1));
}

SafetensorsDtype StDtype(Dtype d) {
  switch (d) {
    case Dtype::kF32: return SafetensorsDtype::kF32;
    case Dtype::kF16: return SafetensorsDtype::kF16;
    case Dtype::kBF16: return SafetensorsDtype::kBF16;
    default: throw std::runtime_error("safetensors holds f32, f16 or bf16");
  }
}

GgmlType GgmlOf(Dtype d) {
  switch (d) {
    case Dtype::kF32: return GgmlType::kF32;
    case Dtype::kF16: return GgmlType::kF16;
    case Dtype::kBF16: return GgmlType::kBF16;
    case Dtype::kQ8_0: return GgmlType::kQ8_0;
    case Dtype::kQ4_0: return GgmlType::kQ4_0;
    case Dtype::kQ4_K: return GgmlType::kQ4_K;
    case Dtype::kQ5_K: return GgmlType::kQ5_K;
    case Dtype::kQ6_K: return GgmlType::kQ6_K;
    case Dtype::kQ5_0: return GgmlType::kQ5_0;
  }
  throw std::runtime_error("no ggml type");
}

// llama.cpp's row order for a llama q or k matrix: in each head of D rows, stored row 2i is
// row i and 2i + 1 is row D/2 + i.
daemon::model::Tensor Interleaved(const daemon::model::Tensor& t, int64_t head_dim,
                                  std::vector<std::shared_ptr<const void>>& backing) {
  const std::vector<float> in = t.ToFloats();
  std::vector<float> out(in.size());
  const int64_t cols = t.shape[1], rows = t.shape[0];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, j = r % head_dim;
    const int64_t source = head * head_dim + (j % 2 == 0 ? j / 2 : head_dim / 2 + j / 2);
    std::copy_n(in.begin() + source * cols, cols, out.begin() + r * cols);
  }
  return daemon::model::OwnedTensor(std::move(out), t.shape, backing);
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

ModelConfig TinyFamilyConfig(Architecture a) {
  ModelConfig c;
  c.architecture = a;
  c.vocab_size = TinyFamilyTokenizerSize(a) + (a == Architecture::kQwen2 ? 8 : 0);
  c.context = 64;
  c.width = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.d_ff = 128;
  c.head_size = a == Architecture::kQwen3 ? 32 : 16;
  c.rope_pairs = daemon::model::RopePairs::kHalves;
  c.mlp_bias = false;
  c.tied_embeddings = a != Architecture::kQwen2;
  c.attention_bias = a == Architecture::kQwen2;
  c.qk_norm = a == Architecture::kQwen3;
  c.rms_norm_eps = a == Architecture::kLlama ? 1e-5 : 1e-6;
  c.rope_theta = a == Architecture::kLlama ? 500000.0 : 1000000.0;
  if (a == Architecture::kLlama) {
    c.rope_scaling = {daemon::model::RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 16};
  }
  return c;
}

Weights TinyFamilyWeights(const ModelConfig& config, uint64_t seed) {
  return daemon::model::RandomWeights(config, seed, 0.3, /*fused_qkv=*/false);
}

int64_t TinyFamilyTokenizerSize(Architecture a) {
  return static_cast<int64_t>(Vocab().pieces.size() + AddedTokens(a).size());
}

int32_t TinyFamilyTokenId(Architecture a, const std::string& text) {
  const auto added = AddedTokens(a);
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].text == text) return static_cast<int32_t>(Vocab().pieces.size() + i);
  }
  throw std::runtime_error("no added token " + text);
}

std::string TensorBytes(const daemon::model::Tensor& tensor, Dtype dtype) {
  const std::vector<float> floats = tensor.ToFloats();
  const daemon::model::Tensor shaped{nullptr, dtype, tensor.shape};
  std::string bytes(static_cast<size_t>(shaped.bytes()), '\0');
  if (!floats.empty()) {
    daemon::kernels::simd::FromFloat(floats.data(), static_cast<int64_t>(floats.size()), dtype, bytes.data());
  }
  return bytes;
}

HfModelFiles::Tensor* HfModelFiles::Find(const std::string& name) {
  for (Tensor& t : tensors) {
    if (t.file.name == name) return &t;
  }
  return nullptr;
}

void HfModelFiles::Write(const std::filesystem::path& dir, int shards) const {
  std::filesystem::create_directories(dir);
  WriteText(dir / "config.json", config.dump(2));
  if (!generation_config.is_null()) WriteText(dir / "generation_config.json", generation_config.dump(2));
  WriteText(dir / "tokenizer.json", tokenizer.dump());
  WriteText(dir / "tokenizer_config.json", tokenizer_config.dump(2));
  const int n = std::max(shards, 1);
  json weight_map = json::object();
  for (int s = 0; s < n; ++s) {
    const std::string file = n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
    std::vector<daemon::formats::SafetensorsEntry> entries;
    for (size_t i = static_cast<size_t>(s); i < tensors.size(); i += static_cast<size_t>(n)) {
      entries.push_back({tensors[i].file.name, tensors[i].dtype, tensors[i].file.shape, tensors[i].file.bytes.data()});
      weight_map[tensors[i].file.name] = file;
    }
    const auto status = daemon::formats::WriteSafetensors(dir / file, entries);
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }
  if (n > 1) WriteText(dir / "model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump(2));
}

HfModelFiles MakeHfModel(const ModelConfig& config, const Weights& weights, Dtype dtype) {
  HfModelFiles files;
  const Architecture a = config.architecture;
  files.config = ConfigJson(config);
  files.generation_config = {{"eos_token_id", EosIds(a)}, {"do_sample", true}};
  files.tokenizer = TokenizerJson(a);
  files.tokenizer_config = TokenizerConfigJson(a);
  weights.ForEach([&](const std::string& ours, const daemon::model::Tensor& t) {
    if (ours == "rope_freqs") return;  // config.json's rope_scaling
    const Dtype d = t.shape.size() == 2 ? dtype : Dtype::kF32;
    files.tensors.push_back({{HfName(ours), t.shape, TensorBytes(t, d)}, StDtype(d)});
  });
  return files;
}

GgufModelFiles::Tensor* GgufModelFiles::Find(const std::string& name) {
  for (Tensor& t : tensors) {
    if (t.file.name == name) return &t;
  }
  return nullptr;
}

void GgufModelFiles::Set(const std::string& key, GgufWriteValue value) {
  for (auto& [k, v] : metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata.emplace_back(key, std::move(value));
}

void GgufModelFiles::Remove(const std::string& key) {
  std::erase_if(metadata, [&](const auto& kv) { return kv.first == key; });
}

void GgufModelFiles::Write(const std::filesystem::path& path) const {
  daemon::formats::GgufWriter writer;
  for (const auto& [key, value] : metadata) {
    const auto status = writer.AddMetadata(key, value);
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }
  for (const Tensor& t : tensors) {
    const std::vector<int64_t> dims(t.file.shape.rbegin(), t.file.shape.rend());
    const auto status = writer.AddTensor(t.file.name, t.type, dims, t.file.bytes.data());
    if (!status.ok()) throw std::runtime_error(status.ToString());
  }
  const auto status = writer.Write(path);
  if (!status.ok()) throw std::runtime_error(status.ToString());
}

GgufModelFiles MakeGgufModel(const ModelConfig& config, const Weights& weights, Dtype dtype,
                             const std::function<std::optional<Dtype>(const std::string&)>& type_of) {
  GgufModelFiles files;
  const Architecture a = config.architecture;
  const std::string arch(daemon::model::ArchitectureName(a));
  auto u32 = [](int64_t v) { return GgufWriteValue::U32(static_cast<uint32_t>(v)); };
  files.metadata = {{"general.architecture", GgufWriteValue::String(arch)},
                    {"general.name", GgufWriteValue::String("tiny " + arch)},
                    {arch + ".block_count", u32(config.layers)},
                    {arch + ".context_length", u32(config.context)},
                    {arch + ".embedding_length", u32(config.width)},
                    {arch + ".feed_forward_length", u32(config.d_ff)},
                    {arch + ".attention.head_count", u32(config.heads)},
                    {arch + ".attention.head_count_kv", u32(config.kv_head_count())},
                    {arch + ".rope.freq_base", GgufWriteValue::F32(static_cast<float>(config.rope_theta))},
                    {arch + ".attention.layer_norm_rms_epsilon", GgufWriteValue::F32(static_cast<float>(config.rms_norm_eps))}};
  if (config.head_size > 0) {
    files.metadata.emplace_back(arch + ".attention.key_length", u32(config.head_size));
    files.metadata.emplace_back(arch + ".attention.value_length", u32(config.head_size));
  }
  if (IsLlama(a)) {
    files.metadata.emplace_back("llama.vocab_size", u32(config.vocab_size));
    files.metadata.emplace_back("llama.rope.dimension_count", u32(config.head_dim()));
  }
  // The tokenizer: every id of the model, unused ones past the tokenizer's.
  const TinyVocab& v = Vocab();
  std::vector<std::string> tokens = v.pieces;
  std::vector<int32_t> types(v.pieces.size(), 1);
  for (const AddedToken& t : AddedTokens(a)) {
    tokens.push_back(t.text);
    types.push_back(t.special || (t.text.rfind("<|", 0) == 0) ? 3 : 4);
  }
  while (static_cast<int64_t>(tokens.size()) < config.vocab_size) {
    tokens.push_back(fmt::format("[PAD{}]", tokens.size()));
    types.push_back(5);
  }
  std::vector<std::string> merges;
  for (const auto& [l, r] : v.merges) merges.push_back(l + " " + r);
  files.metadata.emplace_back("tokenizer.ggml.model", GgufWriteValue::String("gpt2"));
  files.metadata.emplace_back("tokenizer.ggml.pre", GgufWriteValue::String(IsLlama(a) ? "llama-bpe" : "qwen2"));
  files.metadata.emplace_back("tokenizer.ggml.tokens", GgufWriteValue::StringArray(tokens));
  files.metadata.emplace_back("tokenizer.ggml.token_type", GgufWriteValue::I32Array(types));
  files.metadata.emplace_back("tokenizer.ggml.merges", GgufWriteValue::StringArray(merges));
  if (IsLlama(a)) {
    files.metadata.emplace_back("tokenizer.ggml.bos_token_id", u32(TinyFamilyTokenId(a, "<|begin_of_text|>")));
    files.metadata.emplace_back("tokenizer.ggml.eos_token_id", u32(TinyFamilyTokenId(a, "<|eot_id|>")));
    files.metadata.emplace_back("tokenizer.ggml.add_bos_token", GgufWriteValue::Bool(true));
  } else {
    files.metadata.emplace_back("tokenizer.ggml.bos_token_id", u32(TinyFamilyTokenId(a, "<|endoftext|>")));
    files.metadata.emplace_back("tokenizer.ggml.eos_token_id", u32(TinyFamilyTokenId(a, "<|im_end|>")));
    files.metadata.emplace_back("tokenizer.ggml.padding_token_id", u32(TinyFamilyTokenId(a, "<|endoftext|>")));
    files.metadata.emplace_back("tokenizer.ggml.add_bos_token", GgufWriteValue::Bool(false));
  }
  files.metadata.emplace_back("tokenizer.chat_template", GgufWriteValue::String(IsLlama(a) ? kLlamaTemplate : kQwenTemplate));

  std::vector<std::shared_ptr<const void>> backing;
  weights.ForEach([&](const std::string& ours, const daemon::model::Tensor& t) {
    daemon::model::Tensor stored = t;
    const bool qk = ours.size() > 3 && (ours.ends_with(".wq") || ours.ends_with(".wk"));
    if (IsLlama(a) && qk) stored = Interleaved(t, config.head_dim(), backing);
    const std::string name = GgufName(ours);
    Dtype d = t.shape.size() == 2 ? dtype : Dtype::kF32;
    if (t.shape.size() == 2 && type_of) d = type_of(name).value_or(d);
    files.tensors.push_back({{name, t.shape, TensorBytes(stored, d)}, GgmlOf(d)});
  });
  return files;
}

SentencePieceTokens TinySentencePieceTokens(int64_t vocab_size) {
  const std::string space = "\xE2\x96\x81";  // U+2581
  SentencePieceTokens v;
  std::vector<std::string>& tokens = v.tokens;
  std::vector<int32_t>& types = v.types;
  std::vector<float>& scores = v.scores;
  tokens = {"<unk>", "<s>", "</s>"};
  types = {2, 3, 3};
  scores = {0.0f, 0.0f, 0.0f};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
    scores.push_back(0.0f);
  }
  std::set<std::string> known;
  auto add = [&](const std::string& piece, float score) {
    if (!known.insert(piece).second) return;
    tokens.push_back(piece);
    types.push_back(1);
    scores.push_back(score);
  };
  add(space, -1000.0f);
  for (char c = 'a'; c <= 'z'; ++c) add(std::string(1, c), -1000.0f);
  for (char c = '0'; c <= '9'; ++c) add(std::string(1, c), -1000.0f);
  float rank = 0.0f;
  for (const std::string& word : MergedWords()) {
    if (word.find('\n') != std::string::npos) continue;
    std::string spelled;
    for (char c : word) spelled += c == ' ' ? space : std::string(1, c);
    // Left to right, as the byte-level merges build it: the first character (U+2581 is 3 bytes).
    size_t first = spelled.rfind(space, 0) == 0 ? space.size() : 1;
    for (size_t end = first + 1; end <= spelled.size(); ++end) add(spelled.substr(0, end), -(rank += 1.0f));
  }
  if (static_cast<int64_t>(tokens.size()) > vocab_size) {
    throw std::runtime_error(fmt::format("TinySentencePieceTokens: {} ids, at least {} needed", vocab_size, tokens.size()));
  }
  for (int n = 0; static_cast<int64_t>(tokens.size()) < vocab_size; ++n) add(space + "w" + std::to_string(n), -500.0f - n);
  return v;
}

void UseSentencePieceVocabulary(GgufModelFiles& files, const SentencePieceTokens& vocabulary) {
  for (const char* key : {"tokenizer.ggml.pre", "tokenizer.ggml.merges", "tokenizer.ggml.padding_token_id"}) files.Remove(key);
  auto u32 = [](int64_t v) { return GgufWriteValue::U32(static_cast<uint32_t>(v)); };
  files.Set("tokenizer.ggml.model", GgufWriteValue::String("llama"));
  files.Set("tokenizer.ggml.tokens", GgufWriteValue::StringArray(vocabulary.tokens));
  files.Set("tokenizer.ggml.scores", GgufWriteValue::F32Array(vocabulary.scores));
  files.Set("tokenizer.ggml.token_type", GgufWriteValue::I32Array(vocabulary.types));
  files.Set("tokenizer.ggml.bos_token_id", u32(1));
  files.Set("tokenizer.ggml.eos_token_id", u32(2));
  files.Set("tokenizer.ggml.unknown_token_id", u32(0));
  files.Set("tokenizer.ggml.add_bos_token", GgufWriteValue::Bool(true));
  files.Set("tokenizer.ggml.add_eos_token", GgufWriteValue::Bool(false));
  files.Set("tokenizer.chat_template",
            GgufWriteValue::String("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
                                   "{{ '[INST] <<SYS>>\\n' + m['content'] + '\\n<</SYS>> [/INST]' }}"
                                   "{% elif m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
                                   "{% else %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}"));
}

}  // namespace niels::testing
