#include "daemon/http/openai_common.h"

#include <algorithm>
#include <ctime>
#include <string>
#include <vector>
#include <random>

#include <fmt/format.h>

namespace niels::daemon::http {

void ReadModel(FieldReader& fields, const ModelView& model) {
  std::optional<std::string> name = fields.String("model");
  if (!name || *name == model.id || *name == kModelAlias) return;
  fields.Fail(MakeError(404, fmt::format("The model '{}' does not exist: nielsd serves '{}' (or '{}')", *name,
                                              model.id, kModelAlias), "model", "model_not_found"));
}

void ReadSampling(FieldReader& fields, niels::v1::Sampling* sampling) {
  sampling->set_temperature(static_cast<float>(fields.Number("temperature", 0.0, 2.0).value_or(1.0)));
  sampling->set_top_k(0);
  if (std::optional<double> top_p = fields.Number("top_p", 0.0, 1.0)) {
    // OpenAI's top_p 0 keeps only the most likely token; nielsd's 0 is "off".
    sampling->set_top_p(*top_p <= 0.0 ? 1e-9f : static_cast<float>(*top_p));
  }
  if (std::optional<int64_t> seed = fields.Integer("seed", INT64_MIN, INT64_MAX)) {
    sampling->set_seed(static_cast<uint64_t>(*seed));
  }
}

void ReadLogitBias(FieldReader& fields, const ModelView& model, niels::v1::Sampling* sampling) {
  const nlohmann::json* bias = fields.Object("logit_bias");
  if (bias == nullptr) return;
  constexpr size_t kKeyQuoted = 24;  // a hostile key is quoted in part
  std::vector<int32_t> seen;
  seen.reserve(bias->size());
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    const std::string shown = key.size() > kKeyQuoted ? key.substr(0, kKeyQuoted) + "..." : key;
    const std::string name = "logit_bias." + shown;
    // Decimal digits only, at most 9 of them after leading zeros (below 2^31).
    const size_t first = key.find_first_not_of('0');
    const bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || (first != std::string::npos && key.size() - first > 9)) {
      fields.Fail(name, fmt::format("'{}' is not a token id (a decimal integer >= 0)", shown));
      return;
    }
    const int64_t id = first == std::string::npos ? 0 : std::stoll(key.substr(first));
    if (model.vocab_size > 0 && id >= model.vocab_size) {
      fields.Fail(name, fmt::format("token id {} is outside the vocabulary [0, {})", id, model.vocab_size));
      return;
    }
    if (!it->is_number()) {
      fields.Fail(name, fmt::format("must be a number, not {}", JsonTypeName(*it)));
      return;
    }
    const double value = it->get<double>();
    if (!(value >= -100.0 && value <= 100.0)) {
      fields.Fail(name, fmt::format("{} is out of range [-100, 100]", value));
      return;
    }
    seen.push_back(static_cast<int32_t>(id));
    niels::v1::TokenBias* entry = sampling->add_logit_bias();
    entry->set_id(static_cast<int32_t>(id));
    entry->set_bias(static_cast<float>(value));
  }
  std::sort(seen.begin(), seen.end());
  if (auto repeat = std::adjacent_find(seen.begin(), seen.end()); repeat != seen.end()) {
    fields.Fail("logit_bias", fmt::format("token id {} appears under two keys", *repeat));
  }
}

void ReadStop(FieldReader& fields, google::protobuf::RepeatedPtrField<std::string>* stop_strings) {
  const nlohmann::json* stop = fields.Get("stop");
  if (stop == nullptr) return;
  if (stop->is_string()) {
    stop_strings->Add(stop->get<std::string>());
    return;
  }
  if (!stop->is_array()) {
    fields.Fail("stop", fmt::format("must be a string or an array of strings, not {}", JsonTypeName(*stop)));
    return;
  }
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) {
      fields.Fail(fmt::format("stop[{}]", i), fmt::format("must be a string, not {}", JsonTypeName((*stop)[i])));
      return;
    }
    stop_strings->Add((*stop)[i].get<std::string>());
  }
}

StreamOptions ReadStream(FieldReader& fields) {
  StreamOptions options;
  options.stream = fields.Bool("stream").value_or(false);
  if (const nlohmann::json* stream_options = fields.Object("stream_options")) {
    FieldReader inner = fields.Nested(*stream_options, "stream_options.");
    options.include_usage = inner.Bool("include_usage").value_or(false);
  }
  return options;
}

const char* FinishReason(niels::v1::StopReason reason) {
  switch (reason) {
    case niels::v1::MAX_TOKENS:
    case niels::v1::CONTEXT_FULL:
    case niels::v1::CONSTRAINT_INCOMPLETE:
    case niels::v1::STOPPED:  // (the HTTP fronts never ask for it)
      return "length";
    case niels::v1::TOOL_CALLS:
      return "tool_calls";
    default:
      return "stop";
  }
}

nlohmann::json Usage(const niels::v1::GenerationStats& stats) {
  return {{"prompt_tokens", stats.prompt_tokens()},
          {"completion_tokens", stats.generated_tokens()},
          {"total_tokens", stats.prompt_tokens() + stats.generated_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", stats.reused_tokens()}}}};
}

std::string NewResponseId(const char* prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return fmt::format("{}-{:016x}{:08x}", prefix, generator(), static_cast<uint32_t>(generator()));
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

std::string Dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace niels::daemon::http
