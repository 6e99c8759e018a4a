#include "daemon/text/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/text/json_diagnostics.h"

namespace niels::daemon::text {
namespace {

// tokenizer_config.json is small (tens of KiB) and holds integers beyond 64 bits
// ("model_max_length": 1000000000000000019884624838656) that simdjson refuses, so it is read with
// nlohmann-json, which keeps them as doubles.
using Json = nlohmann::json;

// bos_token and the like: "text", {"content": "text", ...}, null or absent.
common::Status ReadSpecialName(const JsonErrors& errors, const Json& config, const char* key, const BpeSpec& spec,
                               std::optional<int32_t>* id) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return common::Status::Ok();
  const Json* name = &*it;
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content == it->end()) return errors.Invalid(key, "missing key \"content\"");
    name = &*content;
  }
  if (!name->is_string()) return errors.Invalid(key, std::string("expected a string, found ") + name->type_name());
  const auto& text = name->get_ref<const std::string&>();
  *id = FindPieceId(spec, text);
  if (!*id) return errors.Invalid(key, fmt::format("\"{}\" is not in the vocabulary", text));
  return common::Status::Ok();
}

common::Status ReadChatTemplate(const JsonErrors& errors, const Json& config, BpeSpec* spec) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return common::Status::Ok();
  if (it->is_string()) {
    spec->chat_template = it->get<std::string>();
    return common::Status::Ok();
  }
  if (!it->is_array()) return errors.Invalid("chat_template", "expected a string or a list of {name, template}");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& entry = (*it)[i];
    const auto name = entry.is_object() ? entry.find("name") : entry.end();
    const auto text = entry.is_object() ? entry.find("template") : entry.end();
    if (!entry.is_object() || name == entry.end() || text == entry.end() || !name->is_string() || !text->is_string()) {
      return errors.Invalid(fmt::format("chat_template[{}]", i), "expected {\"name\": string, \"template\": string}");
    }
    if (*name == "default") spec->chat_template = text->get<std::string>();
  }
  return common::Status::Ok();
}

}  // namespace

common::Status ApplyTokenizerConfigJson(std::string_view json, std::string_view source, BpeSpec* spec) {
  const JsonErrors errors(source);
  common::JsonParseFailure failure = common::JsonParseFailure::kNone;
  common::StatusOr<Json> parsed = common::ParseJsonBounded(json, source, &failure);
  if (failure == common::JsonParseFailure::kSyntax) return JsonSyntaxError(json, source, "invalid JSON");
  if (!parsed.ok()) return parsed.status();
  const Json& config = *parsed;
  if (!config.is_object()) return errors.Invalid("tokenizer_config", "expected an object");
  NIELS_RETURN_IF_ERROR(ReadSpecialName(errors, config, "bos_token", *spec, &spec->special.bos));
  NIELS_RETURN_IF_ERROR(ReadSpecialName(errors, config, "eos_token", *spec, &spec->special.eos));
  NIELS_RETURN_IF_ERROR(ReadSpecialName(errors, config, "pad_token", *spec, &spec->special.pad));
  if (const auto add_bos = config.find("add_bos_token"); add_bos != config.end() && !add_bos->is_null()) {
    if (!add_bos->is_boolean()) return errors.Invalid("add_bos_token", "expected true or false");
    spec->special.add_bos = add_bos->get<bool>();
  }
  spec->special.add_bos = spec->special.add_bos && spec->special.bos.has_value();
  return ReadChatTemplate(errors, config, spec);
}

}  // namespace niels::daemon::text
