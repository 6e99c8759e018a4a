#include "daemon/loaders/hf_config.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace niels::daemon::loaders {
namespace {

using common::Status;
using common::StatusOr;
using model::Architecture;
using model::ModelConfig;
using model::RopeScaling;
using Json = nlohmann::json;

constexpr int64_t kMaxJsonValue = int64_t{1} << 40;  // ValidateModelConfig bounds each size further

// Parses `text` as a JSON object (nested at most common::kMaxJsonNesting levels).
StatusOr<Json> ParseObject(std::string_view text, const std::string& source) {
  StatusOr<Json> root = common::ParseJsonBounded(text, source);
  if (!root.ok()) return root.status();
  if (!root->is_object()) return Status::InvalidArgument(source + ": invalid JSON: expected an object");
  return root;
}

// The key's value, or nullptr when absent or null.
const Json* Find(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Status KeyError(const std::string& source, std::string_view key, const Json& value, std::string_view expected) {
  return Status::InvalidArgument(
      fmt::format("{}: key \"{}\" must be {}, found {}", source, key, expected, common::JsonExcerpt(value)));
}

// A positive integer key; `fallback` when absent or null (required when there is none).
StatusOr<int64_t> PositiveInt(const Json& object, const std::string& source, const char* key,
                              std::optional<int64_t> fallback = std::nullopt) {
  const Json* value = Find(object, key);
  if (value == nullptr) {
    if (fallback) return *fallback;
    return Status::InvalidArgument(fmt::format("{}: missing key \"{}\"", source, key));
  }
  if (!value->is_number_integer() || (value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(kMaxJsonValue)) ||
      value->get<int64_t>() <= 0 || value->get<int64_t>() > kMaxJsonValue) {
    return KeyError(source, key, *value, "a positive integer");
  }
  return value->get<int64_t>();
}

// A positive finite number key; `fallback` when absent or null.
StatusOr<double> PositiveNumber(const Json& object, const std::string& source, std::string_view where,
                                const char* key, std::optional<double> fallback) {
  const Json* value = Find(object, key);
  const std::string name = where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
  if (value == nullptr) {
    if (fallback) return *fallback;
    return Status::InvalidArgument(fmt::format("{}: missing key \"{}\"", source, name));
  }
  if (!value->is_number() || !std::isfinite(value->get<double>()) || !(value->get<double>() > 0.0)) {
    return KeyError(source, name, *value, "a positive number");
  }
  return value->get<double>();
}

StatusOr<bool> Bool(const Json& object, const std::string& source, const char* key, bool fallback) {
  const Json* value = Find(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return KeyError(source, key, *value, "true or false");
  return value->get<bool>();
}

// An id or a list of ids (a token id: 0 .. INT32_MAX).
StatusOr<std::vector<int32_t>> Ids(const Json& object, const std::string& source, const char* key) {
  const Json* value = Find(object, key);
  std::vector<int32_t> ids;
  if (value == nullptr) return ids;
  auto one = [&](const Json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))) {
      return KeyError(source, key, *value, "a token id or a list of token ids");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    return Status::Ok();
  };
  if (value->is_array()) {
    for (const Json& v : *value) NIELS_RETURN_IF_ERROR(one(v));
  } else {
    NIELS_RETURN_IF_ERROR(one(*value));
  }
  return ids;
}

StatusOr<Architecture> ReadArchitecture(const Json& root, const std::string& source) {
  const Json* value = Find(root, "architectures");
  if (value == nullptr) return Status::InvalidArgument(source + ": missing key \"architectures\"");
  if (!value->is_array() || value->size() != 1 || !(*value)[0].is_string()) {
    return KeyError(source, "architectures", *value, "a list of one architecture name");
  }
  const std::string name = (*value)[0].get<std::string>();
  if (name == "LlamaForCausalLM") return Architecture::kLlama;
  if (name == "Qwen2ForCausalLM") return Architecture::kQwen2;
  if (name == "Qwen3ForCausalLM") return Architecture::kQwen3;
  return Status::InvalidArgument(fmt::format(
      "{}: key \"architectures\" names {}, which nielsd cannot run (supported: LlamaForCausalLM, "
      "Qwen2ForCausalLM, Qwen3ForCausalLM)",
      source, common::JsonExcerpt(*value)));
}

// rope_scaling (or transformers 5's rope_parameters) -> config.rope_scaling; `where` is its key.
Status ReadRopeScaling(const Json& scaling, const std::string& source, const std::string& where, ModelConfig* c) {
  if (!scaling.is_object()) return KeyError(source, where, scaling, "an object or null");
  const Json* type = Find(scaling, "rope_type");
  if (type == nullptr) type = Find(scaling, "type");
  if (type == nullptr) return Status::InvalidArgument(fmt::format("{}: key \"{}\" names no rope_type", source, where));
  if (!type->is_string()) return KeyError(source, where + ".rope_type", *type, "a string");
  const std::string name = type->get<std::string>();
  if (name == "default") return Status::Ok();
  if (name != "llama3") {
    return Status::InvalidArgument(fmt::format(
        "{}: key \"{}\" has rope_type \"{}\", which nielsd does not implement (supported: default, llama3)", source,
        where, name));
  }
  RopeScaling& r = c->rope_scaling;
  r.type = RopeScaling::Type::kLlama3;
  auto factor = PositiveNumber(scaling, source, where, "factor", std::nullopt);
  if (!factor.ok()) return factor.status();
  auto low = PositiveNumber(scaling, source, where, "low_freq_factor", std::nullopt);
  if (!low.ok()) return low.status();
  auto high = PositiveNumber(scaling, source, where, "high_freq_factor", std::nullopt);
  if (!high.ok()) return high.status();
  auto original = PositiveInt(scaling, source, "original_max_position_embeddings");
  if (!original.ok()) {
    return Status::InvalidArgument(fmt::format("{} (in \"{}\")", original.status().message(), where));
  }
  r.factor = *factor;
  r.low_freq_factor = *low;
  r.high_freq_factor = *high;
  r.original_context = *original;
  return Status::Ok();
}

// What nielsd cannot run: refused by name.
Status RefuseUnsupported(const Json& root, const std::string& source) {
  if (const Json* act = Find(root, "hidden_act"); act != nullptr && *act != "silu") {
    return KeyError(source, "hidden_act", *act, "\"silu\" (the only activation nielsd implements)");
  }
  if (const Json* partial = Find(root, "partial_rotary_factor");
      partial != nullptr && !(partial->is_number() && partial->get<double>() == 1.0)) {
    return KeyError(source, "partial_rotary_factor", *partial, "1 (nielsd rotates whole heads)");
  }
  if (Find(root, "quantization_config") != nullptr) {
    return Status::InvalidArgument(source + ": key \"quantization_config\": quantized Hugging Face checkpoints "
                                            "are not supported (use a GGUF file for quantized weights)");
  }
  if (const Json* sliding = Find(root, "use_sliding_window"); sliding != nullptr && *sliding != false) {
    return KeyError(source, "use_sliding_window", *sliding, "false (nielsd has no sliding-window attention)");
  }
  if (const Json* types = Find(root, "layer_types")) {
    if (!types->is_array()) return KeyError(source, "layer_types", *types, "a list");
    for (const Json& t : *types) {
      if (t != "full_attention") {
        return KeyError(source, "layer_types", *types, "\"full_attention\" for every layer");
      }
    }
  }
  return Status::Ok();
}

Status ReadSizes(const Json& root, const std::string& source, ModelConfig* c) {
  struct Key {
    const char* name;
    int64_t* out;
  };
  for (const Key& key : {Key{"hidden_size", &c->width}, Key{"num_hidden_layers", &c->layers},
                         Key{"num_attention_heads", &c->heads}, Key{"intermediate_size", &c->d_ff},
                         Key{"vocab_size", &c->vocab_size}, Key{"max_position_embeddings", &c->context}}) {
    auto value = PositiveInt(root, source, key.name);
    if (!value.ok()) return value.status();
    *key.out = *value;
  }
  auto kv_heads = PositiveInt(root, source, "num_key_value_heads", c->heads);
  if (!kv_heads.ok()) return kv_heads.status();
  c->kv_heads = *kv_heads;
  auto head_dim = PositiveInt(root, source, "head_dim", int64_t{0});
  if (!head_dim.ok()) return head_dim.status();
  c->head_size = *head_dim;
  return Status::Ok();
}

Status ReadFlags(const Json& root, const std::string& source, ModelConfig* c) {
  auto tied = Bool(root, source, "tie_word_embeddings", false);
  if (!tied.ok()) return tied.status();
  c->tied_embeddings = *tied;
  auto attention_bias = Bool(root, source, "attention_bias", false);
  if (!attention_bias.ok()) return attention_bias.status();
  auto mlp_bias = Bool(root, source, "mlp_bias", false);
  if (!mlp_bias.ok()) return mlp_bias.status();
  c->rope_pairs = model::RopePairs::kHalves;
  c->attention_bias = c->architecture == Architecture::kQwen2 || *attention_bias;
  c->qk_norm = c->architecture == Architecture::kQwen3;
  c->mlp_bias = c->architecture == Architecture::kLlama && *mlp_bias;
  return Status::Ok();
}

Status ReadRope(const Json& root, const std::string& source, ModelConfig* c) {
  auto theta = PositiveNumber(root, source, "", "rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  c->rope_theta = *theta;
  if (const Json* scaling = Find(root, "rope_scaling")) {
    NIELS_RETURN_IF_ERROR(ReadRopeScaling(*scaling, source, "rope_scaling", c));
  }
  if (const Json* parameters = Find(root, "rope_parameters")) {
    if (!parameters->is_object()) return KeyError(source, "rope_parameters", *parameters, "an object");
    auto nested = PositiveNumber(*parameters, source, "rope_parameters", "rope_theta", c->rope_theta);
    if (!nested.ok()) return nested.status();
    c->rope_theta = *nested;
    NIELS_RETURN_IF_ERROR(ReadRopeScaling(*parameters, source, "rope_parameters", c));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<HfConfig> ParseHfConfig(std::string_view json, const std::string& source) {
  StatusOr<Json> parsed = ParseObject(json, source);
  if (!parsed.ok()) return parsed.status();
  const Json& root = *parsed;
  HfConfig out;
  ModelConfig& c = out.config;
  auto architecture = ReadArchitecture(root, source);
  if (!architecture.ok()) return architecture.status();
  c.architecture = *architecture;
  NIELS_RETURN_IF_ERROR(RefuseUnsupported(root, source));
  NIELS_RETURN_IF_ERROR(ReadSizes(root, source, &c));
  NIELS_RETURN_IF_ERROR(ReadFlags(root, source, &c));
  NIELS_RETURN_IF_ERROR(ReadRope(root, source, &c));
  auto eps = PositiveNumber(root, source, "", "rms_norm_eps", 1e-6);
  if (!eps.ok()) return eps.status();
  c.rms_norm_eps = *eps;
  NIELS_RETURN_IF_ERROR(model::ValidateModelConfig(c, source));
  auto bos = Ids(root, source, "bos_token_id");
  if (!bos.ok()) return bos.status();
  if (bos->size() > 1) return KeyError(source, "bos_token_id", root["bos_token_id"], "one token id");
  if (!bos->empty()) out.bos_id = bos->front();
  auto eos = Ids(root, source, "eos_token_id");
  if (!eos.ok()) return eos.status();
  out.eos_ids = std::move(eos).value();
  return out;
}

StatusOr<std::vector<int32_t>> ParseGenerationConfigEos(std::string_view json, const std::string& source) {
  StatusOr<Json> parsed = ParseObject(json, source);
  if (!parsed.ok()) return parsed.status();
  return Ids(*parsed, source, "eos_token_id");
}

}  // namespace niels::daemon::loaders
