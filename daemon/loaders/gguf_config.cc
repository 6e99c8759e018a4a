#include "daemon/loaders/gguf_config.h"

#include <optional>
#include <string>

#include <fmt/format.h>

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using formats::GgufFile;
using model::Architecture;
using model::ModelConfig;

constexpr uint64_t kMaxMetadataValue = uint64_t{1} << 40;  // ValidateModelConfig bounds each size further


class Reader {
 public:
  Reader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(std::string_view name) const { return arch_ + "." + std::string(name); }

  // A positive integer {arch}.name; `fallback` when absent (required without one).
  StatusOr<int64_t> Size(std::string_view name, std::optional<int64_t> fallback = std::nullopt) const {
    const std::string key = Key(name);
    auto value = formats::OptionalKey(file_.GetUint(key));
    if (!value.ok()) return value.status();
    if (!*value) {
      if (fallback) return *fallback;
      return Missing(key);
    }
    if (**value == 0 || **value > kMaxMetadataValue) {
      return Status::InvalidArgument(fmt::format("{}: key \"{}\" = {} is out of range", file_.path().string(), key,
                                                 **value));
    }
    return static_cast<int64_t>(**value);
  }

  // A positive float {arch}.name; `fallback` when absent (required without one).
  StatusOr<double> Number(std::string_view name, std::optional<double> fallback) const {
    const std::string key = Key(name);
    auto value = formats::OptionalKey(file_.GetFloat(key));
    if (!value.ok()) return value.status();
    if (!*value) {
      if (fallback) return *fallback;
      return Missing(key);
    }
    if (!(**value > 0.0) || !(**value < 1e300)) {
      return Status::InvalidArgument(fmt::format("{}: key \"{}\" = {} must be a positive number",
                                                 file_.path().string(), key, **value));
    }
    return **value;
  }

  Status Missing(const std::string& key) const {
    return Status::InvalidArgument(fmt::format("{}: missing metadata key \"{}\"", file_.path().string(), key));
  }
  Status Refuse(const std::string& key, const std::string& why) const {
    return Status::InvalidArgument(fmt::format("{}: key \"{}\": {}", file_.path().string(), key, why));
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

StatusOr<Architecture> ReadArchitecture(const GgufFile& file) {
  auto name = file.GetString("general.architecture");
  if (!name.ok()) {
    if (name.status().code() == common::StatusCode::kNotFound) {
      return Status::InvalidArgument(file.path().string() + ": missing metadata key \"general.architecture\"");
    }
    return name.status();
  }
  if (*name == "llama") return Architecture::kLlama;
  if (*name == "qwen2") return Architecture::kQwen2;
  if (*name == "qwen3") return Architecture::kQwen3;
  return Status::InvalidArgument(fmt::format(
      "{}: general.architecture \"{}\" is not supported (nielsd runs llama, qwen2 and qwen3)", file.path().string(),
      *name));
}

Status ReadSizes(const GgufFile& file, const Reader& r, ModelConfig* c) {
  struct Key {
    const char* name;
    int64_t* out;
  };
  for (const Key& key : {Key{"context_length", &c->context}, Key{"embedding_length", &c->width},
                         Key{"block_count", &c->layers}, Key{"feed_forward_length", &c->d_ff},
                         Key{"attention.head_count", &c->heads}}) {
    auto value = r.Size(key.name);
    if (!value.ok()) return value.status();
    *key.out = *value;
  }
  auto kv_heads = r.Size("attention.head_count_kv", c->heads);
  if (!kv_heads.ok()) return kv_heads.status();
  c->kv_heads = *kv_heads;
  auto key_length = r.Size("attention.key_length", int64_t{0});
  if (!key_length.ok()) return key_length.status();
  auto value_length = r.Size("attention.value_length", *key_length);
  if (!value_length.ok()) return value_length.status();
  if (*key_length != *value_length) {
    return r.Refuse(r.Key("attention.value_length"),
                    fmt::format("{} differs from attention.key_length = {}; nielsd needs one head size",
                                *value_length, *key_length));
  }
  c->head_size = *key_length;
  auto experts = formats::OptionalKey(file.GetUint(r.Key("expert_count")));
  if (!experts.ok()) return experts.status();
  if (*experts && **experts > 0) return r.Refuse(r.Key("expert_count"), "mixture-of-experts models are not supported");
  return Status::Ok();
}

Status ReadRope(const GgufFile& file, const Reader& r, ModelConfig* c) {
  auto theta = r.Number("rope.freq_base", 10000.0);
  if (!theta.ok()) return theta.status();
  c->rope_theta = *theta;
  auto eps = r.Number("attention.layer_norm_rms_epsilon", std::nullopt);
  if (!eps.ok()) return eps.status();
  c->rms_norm_eps = *eps;
  auto scaling = formats::OptionalKey(file.GetString(r.Key("rope.scaling.type")));
  if (!scaling.ok()) return scaling.status();
  if (*scaling && **scaling != "none") {
    return r.Refuse(r.Key("rope.scaling.type"), fmt::format("\"{}\" rope scaling is not supported", **scaling));
  }
  auto linear = formats::OptionalKey(file.GetFloat(r.Key("rope.scale_linear")));
  if (!linear.ok()) return linear.status();
  if (*linear && **linear != 1.0) return r.Refuse(r.Key("rope.scale_linear"), "linear rope scaling is not supported");
  return Status::Ok();
}

// V from token_embd.weight, and the flags the tensor table decides.
Status ReadTensorFlags(const GgufFile& file, ModelConfig* c) {
  const formats::GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->n_dims != 2) {
    return Status::InvalidArgument(file.path().string() + ": no 2-D tensor token_embd.weight");
  }
  c->vocab_size = embd->dims[1];
  c->tied_embeddings = file.FindTensor("output.weight") == nullptr;
  const bool q_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  c->rope_pairs = model::RopePairs::kHalves;
  c->mlp_bias = false;
  switch (c->architecture) {
    case Architecture::kLlama:
      c->attention_bias = q_bias;
      c->mlp_bias = file.FindTensor("blk.0.ffn_up.bias") != nullptr;
      c->qk_rows_interleaved = true;
      if (file.FindTensor("rope_freqs.weight") != nullptr) c->rope_scaling.type = model::RopeScaling::Type::kLlama3;
      break;
    case Architecture::kQwen2: c->attention_bias = true; break;
    case Architecture::kQwen3:
      c->attention_bias = q_bias;
      c->qk_norm = true;
      break;
    case Architecture::kNielsGpt: break;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file) {
  auto architecture = ReadArchitecture(file);
  if (!architecture.ok()) return architecture.status();
  ModelConfig c;
  c.architecture = *architecture;
  const Reader r(file, std::string(model::ArchitectureName(c.architecture)));
  NIELS_RETURN_IF_ERROR(ReadSizes(file, r, &c));
  NIELS_RETURN_IF_ERROR(ReadRope(file, r, &c));
  NIELS_RETURN_IF_ERROR(ReadTensorFlags(file, &c));
  auto vocab = formats::OptionalKey(file.GetUint(r.Key("vocab_size")));
  if (!vocab.ok()) return vocab.status();
  if (*vocab && **vocab != static_cast<uint64_t>(c.vocab_size)) {
    return r.Refuse(r.Key("vocab_size"), fmt::format("{} disagrees with token_embd.weight's {} rows", **vocab,
                                                     c.vocab_size));
  }
  auto name = formats::OptionalKey(file.GetString("general.name"));
  if (!name.ok()) return name.status();
  if (*name) c.name = std::string(**name);
  NIELS_RETURN_IF_ERROR(model::ValidateModelConfig(c, file.path().string()));
  auto rotated = formats::OptionalKey(file.GetUint(r.Key("rope.dimension_count")));
  if (!rotated.ok()) return rotated.status();
  if (*rotated && **rotated != static_cast<uint64_t>(c.head_dim())) {
    return r.Refuse(r.Key("rope.dimension_count"),
                    fmt::format("{} differs from the head size {}: partial rotary embeddings are not supported",
                                **rotated, c.head_dim()));
  }
  return c;
}

}  // namespace niels::daemon::loaders
