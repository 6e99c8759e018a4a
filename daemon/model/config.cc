#include "daemon/model/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace niels::daemon::model {
namespace {

using common::Status;
using common::StatusOr;
using Json = nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 24;      // any size beyond this is surely corrupt
constexpr int64_t kMaxContext = int64_t{1} << 20;  // T: RoPE tables and KV caches scale with it

// Reads a required positive integer key into *out.
Status ReadInt(const Json& root, const std::string& file, const char* key, int64_t max, int64_t* out) {
  auto it = root.find(key);
  if (it == root.end()) return Status::InvalidArgument(file + ": missing key \"" + key + "\"");
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(file + ": key \"" + key + "\" must be an integer, found " +
                                   common::JsonExcerpt(*it));
  }
  const int64_t value = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(max) ? max + 1 : it->get<int64_t>();
  if (value <= 0 || value > max) {
    return Status::InvalidArgument(file + ": key \"" + key + "\" must be in [1, " + std::to_string(max) +
                                   "], found " + common::JsonExcerpt(*it));
  }
  *out = value;
  return Status::Ok();
}

}  // namespace

std::string_view ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kNielsGpt: return "niels_gpt";
    case Architecture::kLlama: return "llama";
    case Architecture::kQwen2: return "qwen2";
    case Architecture::kQwen3: return "qwen3";
  }
  return "unknown";
}

Status ValidateModelConfig(const ModelConfig& c, const std::string& where) {
  const auto positive = [&](int64_t value, int64_t max, const char* what) -> Status {
    if (value <= 0 || value > max) {
      return Status::InvalidArgument(fmt::format("{}: {} = {} must be in [1, {}]", where, what, value, max));
    }
    return Status::Ok();
  };
  NIELS_RETURN_IF_ERROR(positive(c.vocab_size, kMaxDim, "the vocabulary size V"));
  NIELS_RETURN_IF_ERROR(positive(c.context, kMaxContext, "the context T"));
  NIELS_RETURN_IF_ERROR(positive(c.width, kMaxDim, "the width C"));
  NIELS_RETURN_IF_ERROR(positive(c.layers, kMaxDim, "the number of layers L"));
  NIELS_RETURN_IF_ERROR(positive(c.heads, kMaxDim, "the number of heads H"));
  NIELS_RETURN_IF_ERROR(positive(c.d_ff, kMaxDim, "the feed-forward width F"));
  if (c.kv_heads < 0 || c.head_size < 0) {
    return Status::InvalidArgument(fmt::format("{}: negative key/value heads or head size", where));
  }
  if (c.head_size == 0 && c.width % c.heads != 0) {
    return Status::InvalidArgument(fmt::format("{}: the width C = {} is not divisible by the heads H = {}", where,
                                               c.width, c.heads));
  }
  NIELS_RETURN_IF_ERROR(positive(c.head_dim(), int64_t{1} << 12, "the head size D"));
  if (c.head_dim() % 2 != 0) {
    return Status::InvalidArgument(
        fmt::format("{}: the head size D = {} is odd; RoPE needs an even head size", where, c.head_dim()));
  }
  if (c.heads % c.kv_head_count() != 0) {
    return Status::InvalidArgument(fmt::format("{}: the {} query heads are not a multiple of the {} key/value heads",
                                               where, c.heads, c.kv_head_count()));
  }
  if (c.q_width() > kMaxDim) {
    return Status::InvalidArgument(fmt::format("{}: H x D = {} is too large", where, c.q_width()));
  }
  if (!(c.rope_theta > 0.0) || !std::isfinite(c.rope_theta)) {
    return Status::InvalidArgument(fmt::format("{}: rope_theta = {} must be a positive number", where, c.rope_theta));
  }
  if (!(c.rms_norm_eps > 0.0) || !(c.rms_norm_eps < 1.0)) {
    return Status::InvalidArgument(fmt::format("{}: rms_norm_eps = {} must be in (0, 1)", where, c.rms_norm_eps));
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    const RopeScaling& r = c.rope_scaling;
    if (!(r.factor >= 1.0 && r.factor < 1e6) || !(r.low_freq_factor > 0.0) ||
        !(r.high_freq_factor > r.low_freq_factor) || !(r.high_freq_factor < 1e6) || r.original_context <= 0 ||
        r.original_context > kMaxContext) {
      return Status::InvalidArgument(fmt::format(
          "{}: llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and a positive "
          "original context (factor {}, low {}, high {}, original context {})",
          where, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_context));
    }
  }
  return Status::Ok();
}

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, const std::string& file_name) {
  StatusOr<Json> parsed = common::ParseJsonBounded(json_text, file_name);
  if (!parsed.ok()) return parsed.status();
  const Json& root = *parsed;
  if (!root.is_object()) return Status::InvalidArgument(file_name + ": invalid JSON: expected an object");
  ModelConfig c;
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "V", kMaxDim, &c.vocab_size));
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "T", kMaxContext, &c.context));
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "C", kMaxDim, &c.width));
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "L", kMaxDim, &c.layers));
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "H", kMaxDim, &c.heads));
  NIELS_RETURN_IF_ERROR(ReadInt(root, file_name, "d_ff", kMaxDim, &c.d_ff));
  auto theta = root.find("rope_theta");
  if (theta == root.end()) return Status::InvalidArgument(file_name + ": missing key \"rope_theta\"");
  if (!theta->is_number() || !(theta->get<double>() > 0.0) || !std::isfinite(theta->get<double>())) {
    return Status::InvalidArgument(file_name + ": key \"rope_theta\" must be a positive number, found " +
                                   common::JsonExcerpt(*theta));
  }
  c.rope_theta = theta->get<double>();
  if (auto name = root.find("name"); name != root.end() && !name->is_null()) {
    if (!name->is_string()) {
      return Status::InvalidArgument(file_name + ": key \"name\" must be a string, found " +
                                     common::JsonExcerpt(*name));
    }
    c.name = name->get<std::string>();
  }
  if (c.width % c.heads != 0) {
    return Status::InvalidArgument(file_name + ": key \"C\" (" + std::to_string(c.width) +
                                   ") is not divisible by key \"H\" (" + std::to_string(c.heads) + ")");
  }
  if (c.head_dim() % 2 != 0) {
    return Status::InvalidArgument(file_name + ": head dim C/H = " + std::to_string(c.width) + "/" +
                                   std::to_string(c.heads) + " = " + std::to_string(c.head_dim()) +
                                   " is odd (keys \"C\", \"H\"); RoPE needs an even head dim");
  }
  NIELS_RETURN_IF_ERROR(ValidateModelConfig(c, file_name));
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path.string() + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::NotFound(path.string() + ": cannot read");
  return ParseModelConfig(text.str(), path.string());
}

std::string ModelConfigToJson(const ModelConfig& config) {
  Json j = Json::object();
  j["V"] = config.vocab_size;
  j["T"] = config.context;
  j["C"] = config.width;
  j["L"] = config.layers;
  j["H"] = config.heads;
  j["d_ff"] = config.d_ff;
  j["rope_theta"] = config.rope_theta;
  j["name"] = config.name;
  return j.dump(2) + "\n";
}

}  // namespace niels::daemon::model
