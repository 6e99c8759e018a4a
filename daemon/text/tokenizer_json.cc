#include "daemon/text/tokenizer_json.h"

#include <simdjson.h>

#include <algorithm>
#include <system_error>

#include <fmt/format.h>

#include "common/bounded_json.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/json_diagnostics.h"
#include "daemon/text/tokenizer_config.h"

namespace niels::daemon::text {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// How many ids a vocabulary may leave without a token.
constexpr size_t kMaxUnusedIds = 1024;

// Hugging Face ByteLevel's own split (use_regex: true), GPT-2's.
constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A short, printable rendering of a value for messages.
std::string Describe(element value) {
  std::string text = simdjson::minify(value);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Typed field access. A missing key is "absent" (nullopt-like) only where the caller allows it.
common::StatusOr<element> Field(const JsonErrors& errors, object obj, std::string_view path, std::string_view key) {
  element value;
  if (obj[key].get(value) != simdjson::SUCCESS) return errors.Invalid(path, fmt::format("missing key \"{}\"", key));
  return value;
}


common::StatusOr<object> AsObject(const JsonErrors& errors, element value, std::string_view path) {
  object obj;
  if (value.get(obj) != simdjson::SUCCESS) return errors.Invalid(path, "expected an object, found " + Describe(value));
  return obj;
}

common::StatusOr<array> AsArray(const JsonErrors& errors, element value, std::string_view path) {
  array arr;
  if (value.get(arr) != simdjson::SUCCESS) return errors.Invalid(path, "expected an array, found " + Describe(value));
  return arr;
}

common::StatusOr<std::string_view> AsString(const JsonErrors& errors, element value, std::string_view path) {
  std::string_view text;
  if (value.get(text) != simdjson::SUCCESS) return errors.Invalid(path, "expected a string, found " + Describe(value));
  return text;
}

// An optional boolean: absent or null is `fallback`.
common::StatusOr<bool> OptionalBool(const JsonErrors& errors, object obj, std::string_view path, std::string_view key,
                                    bool fallback) {
  element value;
  if (obj[key].get(value) != simdjson::SUCCESS || value.is_null()) return fallback;
  bool flag = false;
  if (value.get(flag) != simdjson::SUCCESS) {
    return errors.Invalid(fmt::format("{}.{}", path, key), "expected true or false, found " + Describe(value));
  }
  return flag;
}

// An optional string: absent or null is "".
common::StatusOr<std::string_view> OptionalString(const JsonErrors& errors, object obj, std::string_view path,
                                                  std::string_view key) {
  element value;
  if (obj[key].get(value) != simdjson::SUCCESS || value.is_null()) return std::string_view();
  return AsString(errors, value, fmt::format("{}.{}", path, key));
}

common::StatusOr<int32_t> AsId(const JsonErrors& errors, element value, std::string_view path) {
  int64_t id = 0;
  if (value.get(id) != simdjson::SUCCESS) return errors.Invalid(path, "expected an integer id, found " + Describe(value));
  if (id < 0 || static_cast<uint64_t>(id) >= BpeTokenizer::kMaxVocabSize) {
    return errors.Invalid(path, fmt::format("id {} is outside 0 .. {}", id, BpeTokenizer::kMaxVocabSize - 1));
  }
  return static_cast<int32_t>(id);
}

#define NIELS_ASSIGN_OR_RETURN(lhs, expr)        \
  auto lhs##_or = (expr);                        \
  if (!lhs##_or.ok()) return lhs##_or.status();  \
  auto lhs = std::move(lhs##_or).value()

// One vocabulary or added-token entry, before the table is laid out.
struct Entry {
  int32_t id;
  std::string_view piece;
  TokenType type;
  AddedTokenFlags flags;
};

common::Status ReadVocab(const JsonErrors& errors, object model, std::vector<Entry>* entries) {
  NIELS_ASSIGN_OR_RETURN(vocab_value, Field(errors, model, "model", "vocab"));
  NIELS_ASSIGN_OR_RETURN(vocab, AsObject(errors, vocab_value, "model.vocab"));
  entries->reserve(vocab.size() + 512);
  for (const auto field : vocab) {
    int64_t id = -1;
    if (field.value.get(id) != simdjson::SUCCESS || id < 0 ||
        static_cast<uint64_t>(id) >= BpeTokenizer::kMaxVocabSize) {  // the message is made only here
      return AsId(errors, field.value, fmt::format("model.vocab[\"{}\"]", field.key)).status();
    }
    entries->push_back({static_cast<int32_t>(id), field.key, TokenType::kNormal, {}});
  }
  return common::Status::Ok();
}

common::Status ReadMerges(const JsonErrors& errors, object model, BpeSpec* spec) {
  NIELS_ASSIGN_OR_RETURN(merges_value, Field(errors, model, "model", "merges"));
  NIELS_ASSIGN_OR_RETURN(merges, AsArray(errors, merges_value, "model.merges"));
  spec->merges.reserve(merges.size());
  size_t rank = 0;
  for (const element merge : merges) {
    // Paths are formatted only for a message: a file has up to some 300k merges.
    const auto path = [rank] { return fmt::format("model.merges[{}]", rank); };
    ++rank;
    std::string_view line, left, right;
    array pair;
    if (merge.get(line) == simdjson::SUCCESS) {  // "a b", the format before tokenizers 0.20
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
        return errors.Invalid(path(), fmt::format("\"{}\" is not two pieces separated by one space", line));
      }
      spec->merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (merge.get(pair) == simdjson::SUCCESS && pair.size() == 2) {  // ["a", "b"]
      if (pair.at(0).get(left) != simdjson::SUCCESS) return AsString(errors, pair.at(0).value_unsafe(), path() + "[0]").status();
      if (pair.at(1).get(right) != simdjson::SUCCESS) return AsString(errors, pair.at(1).value_unsafe(), path() + "[1]").status();
      spec->merges.emplace_back(left, right);
    } else {
      return errors.Invalid(path(), "expected \"a b\" or [\"a\", \"b\"], found " + Describe(merge));
    }
  }
  return common::Status::Ok();
}

common::Status ReadModelOptions(const JsonErrors& errors, object model, BpeSpec* spec, std::string_view* unk_token) {
  NIELS_ASSIGN_OR_RETURN(type, OptionalString(errors, model, "model", "type"));
  if (!type.empty() && type != "BPE") return errors.Unsupported("model.type", fmt::format("\"{}\"", type));
  NIELS_ASSIGN_OR_RETURN(byte_fallback, OptionalBool(errors, model, "model", "byte_fallback", false));
  if (byte_fallback) return errors.Unsupported("model.byte_fallback", "true");
  element dropout;
  if (model["dropout"].get(dropout) == simdjson::SUCCESS && !dropout.is_null()) {
    double p = 0;
    if (dropout.get(p) != simdjson::SUCCESS || p != 0) return errors.Unsupported("model.dropout", Describe(dropout));
  }
  for (std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    NIELS_ASSIGN_OR_RETURN(value, OptionalString(errors, model, "model", key));
    if (!value.empty()) return errors.Unsupported(fmt::format("model.{}", key), fmt::format("\"{}\"", value));
  }
  NIELS_ASSIGN_OR_RETURN(ignore_merges, OptionalBool(errors, model, "model", "ignore_merges", false));
  NIELS_ASSIGN_OR_RETURN(fuse_unk, OptionalBool(errors, model, "model", "fuse_unk", false));
  NIELS_ASSIGN_OR_RETURN(unk, OptionalString(errors, model, "model", "unk_token"));
  spec->ignore_merges = ignore_merges;
  spec->fuse_unk = fuse_unk;
  *unk_token = unk;
  return common::Status::Ok();
}

common::Status ReadAddedTokens(const JsonErrors& errors, object root, std::vector<Entry>* entries) {
  element value;
  if (root["added_tokens"].get(value) != simdjson::SUCCESS || value.is_null()) return common::Status::Ok();
  NIELS_ASSIGN_OR_RETURN(tokens, AsArray(errors, value, "added_tokens"));
  size_t index = 0;
  for (const element token_value : tokens) {
    const std::string path = fmt::format("added_tokens[{}]", index++);
    NIELS_ASSIGN_OR_RETURN(token, AsObject(errors, token_value, path));
    NIELS_ASSIGN_OR_RETURN(id_value, Field(errors, token, path, "id"));
    NIELS_ASSIGN_OR_RETURN(id, AsId(errors, id_value, path + ".id"));
    NIELS_ASSIGN_OR_RETURN(content_value, Field(errors, token, path, "content"));
    NIELS_ASSIGN_OR_RETURN(content, AsString(errors, content_value, path + ".content"));
    NIELS_ASSIGN_OR_RETURN(special, OptionalBool(errors, token, path, "special", false));
    Entry entry{id, content, special ? TokenType::kControl : TokenType::kUserDefined, {}};
    NIELS_ASSIGN_OR_RETURN(lstrip, OptionalBool(errors, token, path, "lstrip", false));
    NIELS_ASSIGN_OR_RETURN(rstrip, OptionalBool(errors, token, path, "rstrip", false));
    NIELS_ASSIGN_OR_RETURN(single_word, OptionalBool(errors, token, path, "single_word", false));
    NIELS_ASSIGN_OR_RETURN(normalized, OptionalBool(errors, token, path, "normalized", false));
    entry.flags = {lstrip, rstrip, single_word, normalized};
    entries->push_back(entry);
  }
  return common::Status::Ok();
}

// Lays the entries out by id. An added token may repeat a vocabulary entry (same id, same text).
common::Status LayOut(const JsonErrors& errors, const std::vector<Entry>& entries, BpeSpec* spec) {
  int32_t max_id = -1;
  for (const Entry& e : entries) max_id = std::max(max_id, e.id);
  const auto size = static_cast<size_t>(max_id + 1);
  if (size > entries.size() + kMaxUnusedIds) {
    return errors.Invalid("model.vocab", fmt::format("the largest id, {}, leaves more than {} ids unused", max_id,
                                                     kMaxUnusedIds));
  }
  spec->pieces.assign(size, std::string());
  spec->types.assign(size, TokenType::kUnused);
  for (const Entry& e : entries) {
    const auto id = static_cast<size_t>(e.id);
    if (spec->types[id] != TokenType::kUnused) {
      if (spec->pieces[id] != e.piece) {
        return errors.Invalid(e.type == TokenType::kNormal ? "model.vocab" : "added_tokens",
                              fmt::format("id {} is given to both \"{}\" and \"{}\"", e.id, spec->pieces[id], e.piece));
      }
      if (e.type == TokenType::kNormal) continue;  // the added entry (later or earlier) decides the type
    }
    spec->pieces[id].assign(e.piece);
    spec->types[id] = e.type;
    if (e.type != TokenType::kNormal) {
      const AddedTokenFlags& f = e.flags;
      if (f.lstrip || f.rstrip || f.single_word || f.normalized) spec->added_flags.emplace_back(e.id, f);
    }
  }
  return common::Status::Ok();
}

common::Status ReadNormalizer(const JsonErrors& errors, object root, BpeSpec* spec) {
  element value;
  if (root["normalizer"].get(value) != simdjson::SUCCESS || value.is_null()) return common::Status::Ok();
  NIELS_ASSIGN_OR_RETURN(normalizer, AsObject(errors, value, "normalizer"));
  NIELS_ASSIGN_OR_RETURN(type, OptionalString(errors, normalizer, "normalizer", "type"));
  if (type == "NFC") {
    spec->pre_tokenizer.normalization = Normalization::kNfc;
    return common::Status::Ok();
  }
  if (type == "Sequence") {
    NIELS_ASSIGN_OR_RETURN(steps_value, Field(errors, normalizer, "normalizer", "normalizers"));
    NIELS_ASSIGN_OR_RETURN(steps, AsArray(errors, steps_value, "normalizer.normalizers"));
    size_t index = 0;
    for (const element step : steps) {
      const std::string path = fmt::format("normalizer.normalizers[{}]", index++);
      NIELS_ASSIGN_OR_RETURN(step_object, AsObject(errors, step, path));
      NIELS_ASSIGN_OR_RETURN(step_type, OptionalString(errors, step_object, path, "type"));
      if (step_type != "NFC") return errors.Unsupported(path + ".type", fmt::format("\"{}\"", step_type));
      spec->pre_tokenizer.normalization = Normalization::kNfc;
    }
    return common::Status::Ok();
  }
  return errors.Unsupported("normalizer.type", fmt::format("\"{}\"", type));
}

common::Status ReadSplit(const JsonErrors& errors, object split, const std::string& path, BpeSpec* spec) {
  NIELS_ASSIGN_OR_RETURN(pattern_value, Field(errors, split, path, "pattern"));
  NIELS_ASSIGN_OR_RETURN(pattern, AsObject(errors, pattern_value, path + ".pattern"));
  element regex;
  if (pattern["Regex"].get(regex) != simdjson::SUCCESS) {
    return errors.Unsupported(path + ".pattern", "a pattern other than {\"Regex\": ...}");
  }
  NIELS_ASSIGN_OR_RETURN(regex_text, AsString(errors, regex, path + ".pattern.Regex"));
  NIELS_ASSIGN_OR_RETURN(behavior, OptionalString(errors, split, path, "behavior"));
  if (behavior != "Isolated") return errors.Unsupported(path + ".behavior", fmt::format("\"{}\"", behavior));
  NIELS_ASSIGN_OR_RETURN(invert, OptionalBool(errors, split, path, "invert", false));
  if (invert) return errors.Unsupported(path + ".invert", "true");
  spec->pre_tokenizer.split_patterns.emplace_back(regex_text);
  return common::Status::Ok();
}

common::Status ReadByteLevel(const JsonErrors& errors, object step, const std::string& path, BpeSpec* spec) {
  NIELS_ASSIGN_OR_RETURN(prefix, OptionalBool(errors, step, path, "add_prefix_space", false));
  if (prefix) return errors.Unsupported(path + ".add_prefix_space", "true");
  NIELS_ASSIGN_OR_RETURN(use_regex, OptionalBool(errors, step, path, "use_regex", true));
  if (use_regex) spec->pre_tokenizer.split_patterns.emplace_back(kGpt2SplitPattern);
  return common::Status::Ok();
}

common::Status ReadPreTokenizer(const JsonErrors& errors, object root, BpeSpec* spec) {
  NIELS_ASSIGN_OR_RETURN(value, Field(errors, root, "tokenizer", "pre_tokenizer"));
  if (value.is_null()) return errors.Unsupported("pre_tokenizer", "null (only byte-level BPE is)");
  NIELS_ASSIGN_OR_RETURN(pre, AsObject(errors, value, "pre_tokenizer"));
  NIELS_ASSIGN_OR_RETURN(type, OptionalString(errors, pre, "pre_tokenizer", "type"));
  if (type == "ByteLevel") return ReadByteLevel(errors, pre, "pre_tokenizer", spec);
  if (type != "Sequence") return errors.Unsupported("pre_tokenizer.type", fmt::format("\"{}\"", type));
  NIELS_ASSIGN_OR_RETURN(steps_value, Field(errors, pre, "pre_tokenizer", "pretokenizers"));
  NIELS_ASSIGN_OR_RETURN(steps, AsArray(errors, steps_value, "pre_tokenizer.pretokenizers"));
  bool byte_level = false;
  size_t index = 0;
  for (const element step_value : steps) {
    const std::string path = fmt::format("pre_tokenizer.pretokenizers[{}]", index++);
    if (byte_level) return errors.Unsupported(path, "a step after ByteLevel");
    NIELS_ASSIGN_OR_RETURN(step, AsObject(errors, step_value, path));
    NIELS_ASSIGN_OR_RETURN(step_type, OptionalString(errors, step, path, "type"));
    if (step_type == "Split") {
      NIELS_RETURN_IF_ERROR(ReadSplit(errors, step, path, spec));
    } else if (step_type == "ByteLevel") {
      NIELS_RETURN_IF_ERROR(ReadByteLevel(errors, step, path, spec));
      byte_level = true;
    } else {
      return errors.Unsupported(path + ".type", fmt::format("\"{}\"", step_type));
    }
  }
  if (!byte_level) return errors.Unsupported("pre_tokenizer", "a Sequence without ByteLevel (only byte-level BPE is)");
  return common::Status::Ok();
}

common::Status ReadDecoder(const JsonErrors& errors, object root) {
  NIELS_ASSIGN_OR_RETURN(value, Field(errors, root, "tokenizer", "decoder"));
  if (value.is_null()) return errors.Unsupported("decoder", "null (only ByteLevel is)");
  NIELS_ASSIGN_OR_RETURN(decoder, AsObject(errors, value, "decoder"));
  NIELS_ASSIGN_OR_RETURN(type, OptionalString(errors, decoder, "decoder", "type"));
  if (type != "ByteLevel") return errors.Unsupported("decoder.type", fmt::format("\"{}\"", type));
  return common::Status::Ok();
}

// The special token a TemplateProcessing puts first in its single-sequence template, if any.
std::optional<std::string_view> LeadingTemplateToken(object processor) {
  std::string_view type;
  array items;
  if (processor["type"].get(type) != simdjson::SUCCESS || type != "TemplateProcessing" ||
      processor["single"].get(items) != simdjson::SUCCESS || items.size() == 0) {
    return std::nullopt;
  }
  std::string_view id;
  if (items.at(0)["SpecialToken"]["id"].get(id) != simdjson::SUCCESS) return std::nullopt;
  return id;
}

// The post-processor (alone, or one step of a Sequence) that puts a special token first.
std::optional<std::string_view> LeadingSpecialToken(element processor_value) {
  object processor;
  if (processor_value.get(processor) != simdjson::SUCCESS) return std::nullopt;
  std::string_view type;
  array steps;
  if (processor["type"].get(type) == simdjson::SUCCESS && type == "Sequence" &&
      processor["processors"].get(steps) == simdjson::SUCCESS) {
    for (const element step_value : steps) {
      object step;
      if (step_value.get(step) != simdjson::SUCCESS) continue;
      if (auto token = LeadingTemplateToken(step)) return token;
    }
    return std::nullopt;
  }
  return LeadingTemplateToken(processor);
}

common::StatusOr<BpeSpec> FromRoot(const JsonErrors& errors, element root_value) {
  NIELS_ASSIGN_OR_RETURN(root, AsObject(errors, root_value, "tokenizer"));
  NIELS_ASSIGN_OR_RETURN(model_value, Field(errors, root, "tokenizer", "model"));
  NIELS_ASSIGN_OR_RETURN(model, AsObject(errors, model_value, "model"));
  BpeSpec spec;
  std::string_view unk_token;
  NIELS_RETURN_IF_ERROR(ReadModelOptions(errors, model, &spec, &unk_token));
  std::vector<Entry> entries;
  NIELS_RETURN_IF_ERROR(ReadVocab(errors, model, &entries));
  NIELS_RETURN_IF_ERROR(ReadAddedTokens(errors, root, &entries));
  if (entries.empty()) return errors.Invalid("model.vocab", "the vocabulary is empty");
  NIELS_RETURN_IF_ERROR(LayOut(errors, entries, &spec));
  NIELS_RETURN_IF_ERROR(ReadMerges(errors, model, &spec));
  NIELS_RETURN_IF_ERROR(ReadNormalizer(errors, root, &spec));
  NIELS_RETURN_IF_ERROR(ReadPreTokenizer(errors, root, &spec));
  NIELS_RETURN_IF_ERROR(ReadDecoder(errors, root));
  if (!unk_token.empty()) {
    spec.unk = FindPieceId(spec, unk_token);
    if (!spec.unk) return errors.Invalid("model.unk_token", fmt::format("\"{}\" is not in the vocabulary", unk_token));
  }
  element processor;
  if (root["post_processor"].get(processor) == simdjson::SUCCESS) {
    if (const auto first = LeadingSpecialToken(processor)) {
      spec.special.bos = FindPieceId(spec, *first);
      spec.special.add_bos = spec.special.bos.has_value();
    }
  }
  return spec;
}

// `padded`: json is followed by simdjson::SIMDJSON_PADDING readable bytes (no copy needed).
common::StatusOr<BpeSpec> ParseTokenizerJson(std::string_view json, std::string_view source, bool padded) {
  // The depth limit every JSON file of a model shares (common/bounded_json.h), kept by simdjson as
  // it parses; the capacity grows to the text as needed and keeps the limit.
  simdjson::dom::parser parser;
  if (parser.allocate(json.size(), common::kMaxJsonNesting) != simdjson::SUCCESS) {
    return common::Status::ResourceExhausted(fmt::format("{}: cannot allocate the parser for {} bytes", source,
                                                         json.size()));
  }
  element root;
  const auto code = parser.parse(json.data(), json.size(), !padded).get(root);
  if (code == simdjson::DEPTH_ERROR) return common::JsonNestingError(source);
  if (code != simdjson::SUCCESS) return JsonSyntaxError(json, source, simdjson::error_message(code));
  return FromRoot(JsonErrors(source), root);
}

}  // namespace

common::StatusOr<BpeSpec> BpeSpecFromTokenizerJson(std::string_view json, std::string_view source) {
  return ParseTokenizerJson(json, source, /*padded=*/false);
}

common::StatusOr<BpeSpec> LoadBpeSpecFromDirectory(const std::filesystem::path& dir) {
  const std::filesystem::path json_path = dir / "tokenizer.json";
  simdjson::padded_string json;
  if (simdjson::padded_string::load(json_path.string()).get(json) != simdjson::SUCCESS) {
    return common::Status::NotFound(fmt::format("{}: cannot read the file", json_path.string()));
  }
  auto spec = ParseTokenizerJson(std::string_view(json), json_path.string(), /*padded=*/true);
  if (!spec.ok()) return spec;
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    simdjson::padded_string config;
    if (simdjson::padded_string::load(config_path.string()).get(config) != simdjson::SUCCESS) {
      return common::Status::NotFound(fmt::format("{}: cannot read the file", config_path.string()));
    }
    NIELS_RETURN_IF_ERROR(ApplyTokenizerConfigJson(std::string_view(config), config_path.string(), &*spec));
  }
  return spec;
}

}  // namespace niels::daemon::text
