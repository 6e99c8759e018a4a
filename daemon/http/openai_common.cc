#include "daemon/http/openai_common.h"

#include <ctime>
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
