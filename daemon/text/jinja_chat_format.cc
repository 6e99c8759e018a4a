#include "daemon/text/jinja_chat_format.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::text {

using common::Status;
using common::StatusOr;
using nlohmann::ordered_json;

namespace {

// Probe texts: plain words, so that no template trims or splits them and no tokenizer merges them
// with what the template puts around them.
constexpr std::string_view kProbeSystem = "You are a probe.";
constexpr std::string_view kProbeUser = "Hello there";
constexpr std::string_view kProbeUserOther = "World peace";
constexpr std::string_view kProbeAssistant = "General Kenobi";

ordered_json MessageJson(Role role, std::string_view content) {
  return ordered_json{{"role", RoleName(role)}, {"content", std::string(content)}};
}

// What a JSON text holds, read without building it (nlohmann's SAX): whether it parses, its
// nesting depth, and whether a number lies outside what a template value holds (an integer beyond
// 64 bits, a float beyond a double).
class JsonShape final : public nlohmann::json_sax<ordered_json> {
 public:
  explicit JsonShape(int max_depth) : max_depth_(max_depth) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t value) override {
    if (value > static_cast<number_unsigned_t>(INT64_MAX)) out_of_range = true;
    return !out_of_range;
  }
  bool number_float(number_float_t, const string_t& lexeme) override {
    // nlohmann reads an integer beyond 64 bits as a float; Python keeps it exact.
    if (lexeme.find_first_of(".eE") == string_t::npos) out_of_range = true;
    return !out_of_range;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) override {
    if (error.id == 406) out_of_range = true;  // a float beyond a double ("number overflow")
    syntax_error = !out_of_range;
    return false;
  }

  bool out_of_range = false;
  bool too_deep = false;
  bool syntax_error = false;

 private:
  bool Enter() {
    too_deep = ++depth_ > max_depth_;
    return !too_deep;
  }
  bool Leave() {
    --depth_;
    return true;
  }
  int max_depth_;
  int depth_ = 0;
};

// A JSON text as the value templates see (an object for a call's arguments or a tool's
// parameters, as transformers passes them after json.loads); text that does not parse stays a
// string. INVALID_ARGUMENT naming `field` for JSON nested deeper than kMaxToolJsonDepth or holding
// a number a template value cannot hold as Python would (json.loads keeps such integers exact and
// reads such floats as infinity).
StatusOr<ordered_json> JsonValue(const std::string& text, const std::string& field) {
  JsonShape shape(kMaxToolJsonDepth);
  const bool parsed = ordered_json::sax_parse(text, &shape, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (shape.too_deep) {
    return Status::InvalidArgument(fmt::format("{} nests deeper than {} levels", field, kMaxToolJsonDepth));
  }
  if (shape.out_of_range) {
    return Status::InvalidArgument(field + " holds a number beyond a 64-bit integer or a double");
  }
  if (!parsed || shape.syntax_error) return ordered_json(text);
  ordered_json value = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return ordered_json(text);
  return value;
}

// The length of the longest common prefix of two id lists.
size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(mismatch.first - a.begin());
}

Status TemplateStatus(const Status& status) {
  return Status(status.code(), "the model's chat template: " + status.message());
}

// The UTF-8 bytes of a code point of the Basic Multilingual Plane at or above U+0800.
std::string ThreeByteUtf8(char32_t c) {
  return {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
          static_cast<char>(0x80 | (c & 0x3F))};
}

// The first private-use code point (U+E000...) the template's source does not write: what marks
// the special-token literals of message contents while the template renders them.
std::string PickContentMarker(const std::string& source) {
  for (char32_t c = 0xE000; c <= 0xF8FF; ++c) {
    std::string marker = ThreeByteUtf8(c);
    if (source.find(marker) == std::string::npos) return marker;
  }
  return ThreeByteUtf8(0xE000);  // a template that writes all 6400 of them: contents may mislead it
}

}  // namespace

JinjaChatFormat::JinjaChatFormat(const ChatFormatSource& source, jinja::Template chat_template,
                                 JinjaChatFormatOptions options)
    : tokenizer_(*source.tokenizer),
      template_(std::move(chat_template)),
      options_(std::move(options)),
      add_bos_id_(source.add_bos_id),
      marker_(PickContentMarker(source.chat_template)) {
  if (!source.bos_token.empty()) bos_token_ = source.bos_token;
  if (!source.eos_token.empty()) eos_token_ = source.eos_token;
}

StatusOr<std::unique_ptr<JinjaChatFormat>> JinjaChatFormat::Create(const ChatFormatSource& source,
                                                                   JinjaChatFormatOptions options) {
  StatusOr<jinja::Template> parsed = jinja::Template::Parse(source.chat_template);
  if (!parsed.ok()) return TemplateStatus(parsed.status());
  std::unique_ptr<JinjaChatFormat> format(new JinjaChatFormat(source, std::move(parsed).value(), std::move(options)));
  NIELS_RETURN_IF_ERROR(format->Probe(source));
  return format;
}

std::string JinjaChatFormat::MarkContent(std::string_view content, std::vector<std::string>* literals) const {
  const std::vector<TextRange> found = tokenizer_.FindSpecialLiterals(content);
  if (found.empty() && content.find(marker_) == std::string_view::npos) return std::string(content);
  std::string marked;
  marked.reserve(content.size() + 8 * found.size());
  auto append_text = [&](std::string_view text) {
    for (size_t at = text.find(marker_); at != std::string_view::npos; at = text.find(marker_)) {
      marked.append(text.substr(0, at + marker_.size()));
      marked += '_';
      text.remove_prefix(at + marker_.size());
    }
    marked.append(text);
  };
  size_t done = 0;
  for (const TextRange& literal : found) {
    append_text(content.substr(done, literal.begin - done));
    marked += marker_;
    marked += std::to_string(literals->size());
    marked += ';';
    literals->emplace_back(content.substr(literal.begin, literal.end - literal.begin));
    done = literal.end;
  }
  append_text(content.substr(done));
  return marked;
}

ordered_json JinjaChatFormat::MarkJson(const ordered_json& value, std::vector<std::string>* literals) const {
  if (value.is_string()) return MarkContent(value.get_ref<const std::string&>(), literals);
  if (value.is_array()) {
    ordered_json out = ordered_json::array();
    for (const ordered_json& item : value) out.push_back(MarkJson(item, literals));
    return out;
  }
  if (value.is_object()) {
    ordered_json out = ordered_json::object();
    for (auto it = value.begin(); it != value.end(); ++it) out[MarkContent(it.key(), literals)] = MarkJson(it.value(), literals);
    return out;
  }
  return value;
}

JinjaChatFormat::MarkedRendering JinjaChatFormat::Unmark(std::string_view rendered,
                                                         const std::vector<std::string>& literals) const {
  MarkedRendering out;
  out.text.reserve(rendered.size());
  size_t pos = 0;
  for (size_t at = rendered.find(marker_, pos); at != std::string_view::npos; at = rendered.find(marker_, pos)) {
    out.text.append(rendered.substr(pos, at - pos));
    const size_t after = at + marker_.size();
    if (after < rendered.size() && rendered[after] == '_') {  // a marker character of the content itself
      out.text += marker_;
      pos = after + 1;
      continue;
    }
    size_t end = after;
    size_t index = 0;
    while (end < rendered.size() && end - after < 12 && rendered[end] >= '0' && rendered[end] <= '9') {
      index = index * 10 + static_cast<size_t>(rendered[end] - '0');
      ++end;
    }
    if (end > after && end < rendered.size() && rendered[end] == ';' && index < literals.size()) {
      out.plain.push_back({out.text.size(), out.text.size() + literals[index].size()});
      out.text += literals[index];
      pos = end + 1;
      continue;
    }
    out.text += marker_;  // not one of ours (the template took a content apart): text as it stands
    pos = after;
  }
  out.text.append(rendered.substr(pos));
  return out;
}

StatusOr<std::string> JinjaChatFormat::Render(const std::optional<std::string>& system_prompt,
                                              std::span<const ChatMessage> conversation,
                                              const std::optional<std::string_view>& user_text,
                                              bool add_generation_prompt, const ChatOptions& options) const {
  StatusOr<MarkedRendering> rendered = RenderMarked(system_prompt, conversation, user_text, add_generation_prompt, options);
  if (!rendered.ok()) return rendered.status();
  return std::move(rendered->text);
}

StatusOr<JinjaChatFormat::MarkedRendering> JinjaChatFormat::RenderMarked(
    const std::optional<std::string>& system_prompt, std::span<const ChatMessage> conversation,
    const std::optional<std::string_view>& user_text, bool add_generation_prompt, const ChatOptions& options) const {
  std::vector<std::string> literals;
  jinja::ChatTemplateInputs inputs;
  if (system_prompt) inputs.messages.push_back(MessageJson(Role::kSystem, MarkContent(*system_prompt, &literals)));
  for (const ChatMessage& message : conversation) {
    ordered_json json = MessageJson(message.role, MarkContent(message.content, &literals));
    if (reasoning_tags_ && !message.reasoning.empty()) {
      json["reasoning_content"] = MarkContent(message.reasoning, &literals);
    }
    if (!message.tool_calls.empty()) {
      ordered_json calls = ordered_json::array();
      for (const ToolCall& call : message.tool_calls) {
        StatusOr<ordered_json> arguments =
            JsonValue(call.arguments, fmt::format("conversation message {}'s tool call {} arguments",
                                                  &message - conversation.data(), calls.size()));
        if (!arguments.ok()) return arguments.status();
        calls.push_back(ordered_json{{"id", MarkContent(call.id, &literals)},
                                     {"type", "function"},
                                     {"function",
                                      {{"name", MarkContent(call.name, &literals)},
                                       {"arguments", MarkJson(*arguments, &literals)}}}});
      }
      json["tool_calls"] = std::move(calls);
    }
    if (message.role == Role::kTool) {
      json["tool_call_id"] = MarkContent(message.tool_call_id, &literals);
      if (!message.name.empty()) json["name"] = MarkContent(message.name, &literals);
    }
    inputs.messages.push_back(std::move(json));
  }
  if (user_text) inputs.messages.push_back(MessageJson(Role::kUser, MarkContent(*user_text, &literals)));
  // `tools`: [{"type": "function", "function": {"name", "description", "parameters"}}] with the
  // keys a definition gives; None without tools.
  inputs.tools = nullptr;
  if (options.tools && !options.tools->empty()) {
    inputs.tools = ordered_json::array();
    for (const ToolDefinition& tool : *options.tools) {
      ordered_json function{{"name", MarkContent(tool.name, &literals)}};
      if (!tool.description.empty()) function["description"] = MarkContent(tool.description, &literals);
      if (!tool.parameters.empty()) {
        StatusOr<ordered_json> parameters =
            JsonValue(tool.parameters, fmt::format("tool {}'s parameters", inputs.tools.size()));
        if (!parameters.ok()) return parameters.status();
        function["parameters"] = MarkJson(*parameters, &literals);
      }
      inputs.tools.push_back(ordered_json{{"type", "function"}, {"function", std::move(function)}});
    }
  }
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_token_;
  inputs.eos_token = eos_token_;
  if (options.enable_thinking) inputs.extra["enable_thinking"] = *options.enable_thinking;
  jinja::RenderOptions render_options;
  render_options.limits = options_.limits;
  if (options_.now) render_options.now = options_.now();
  StatusOr<std::string> rendered = jinja::RenderChat(template_, inputs, render_options);
  if (!rendered.ok()) return TemplateStatus(rendered.status());
  return Unmark(*rendered, literals);
}

StatusOr<std::vector<int32_t>> JinjaChatFormat::Encode(std::string_view rendered) const {
  return EncodeKeepingText(rendered, {});
}

StatusOr<std::vector<int32_t>> JinjaChatFormat::EncodeKeepingText(std::string_view rendered,
                                                                  std::span<const TextRange> plain) const {
  StatusOr<std::vector<int32_t>> ids = tokenizer_.EncodeRenderedKeepingText(rendered, plain);
  if (!ids.ok()) return ids.status();
  if (add_bos_id_ && (ids->empty() || ids->front() != *add_bos_id_)) ids->insert(ids->begin(), *add_bos_id_);
  return ids;
}

StatusOr<ChatPrompt> JinjaChatFormat::EncodeTurn(const std::optional<std::string>& system_prompt,
                                                 std::span<const ChatMessage> conversation, std::string_view user_text,
                                                 const ChatOptions& options) const {
  return EncodeMarked(system_prompt, conversation, user_text, true, options);
}

StatusOr<ChatPrompt> JinjaChatFormat::EncodeConversation(const std::optional<std::string>& system_prompt,
                                                         std::span<const ChatMessage> conversation,
                                                         const ChatOptions& options) const {
  return EncodeMarked(system_prompt, conversation, std::nullopt, true, options);
}

StatusOr<ChatPrompt> JinjaChatFormat::EncodeConversation(const std::optional<std::string>& system_prompt,
                                                         std::span<const ChatMessage> conversation,
                                                         bool add_generation_prompt, const ChatOptions& options) const {
  return EncodeMarked(system_prompt, conversation, std::nullopt, add_generation_prompt, options);
}

StatusOr<std::vector<int32_t>> JinjaChatFormat::EncodeCompleted(const std::optional<std::string>& system_prompt,
                                                                std::span<const ChatMessage> conversation,
                                                                const ChatOptions& options) const {
  StatusOr<ChatPrompt> prompt = EncodeMarked(system_prompt, conversation, std::nullopt, false, options);
  if (!prompt.ok()) return prompt.status();
  return std::move(prompt->ids);
}

StatusOr<ChatPrompt> JinjaChatFormat::EncodeMarked(const std::optional<std::string>& system_prompt,
                                                   std::span<const ChatMessage> conversation,
                                                   const std::optional<std::string_view>& user_text,
                                                   bool add_generation_prompt, const ChatOptions& options) const {
  StatusOr<MarkedRendering> rendered =
      RenderMarked(system_prompt, conversation, user_text, add_generation_prompt, options);
  if (!rendered.ok()) return rendered.status();
  StatusOr<std::vector<int32_t>> ids = EncodeKeepingText(rendered->text, rendered->plain);
  if (!ids.ok()) return ids.status();
  ChatPrompt prompt;
  prompt.ids = std::move(*ids);
  if (reasoning_tags_) {
    // The generation prompt left a reasoning block open (the template opens it for the model).
    const size_t open = rendered->text.rfind(reasoning_tags_->open);
    const size_t close = rendered->text.rfind(reasoning_tags_->close);
    prompt.starts_in_reasoning = open != std::string::npos && (close == std::string::npos || open > close);
    if (add_generation_prompt && open != std::string::npos && close != std::string::npos && close > open) {
      const std::string_view after = std::string_view(rendered->text).substr(close + reasoning_tags_->close.size());
      prompt.reasoning_closed = after.find_first_not_of(" \t\r\n") == std::string_view::npos;
    }
  }
  return prompt;
}

StatusOr<std::vector<int32_t>> JinjaChatFormat::SessionStart(const std::optional<std::string>& system_prompt) const {
  StatusOr<ChatPrompt> one = EncodeTurn(system_prompt, {}, kProbeUser, {});
  if (!one.ok()) return one.status();
  StatusOr<ChatPrompt> other = EncodeTurn(system_prompt, {}, kProbeUserOther, {});
  if (!other.ok()) return other.status();
  std::vector<int32_t> start = std::move(one->ids);
  start.resize(CommonPrefix(start, other->ids));
  // The text right before the user's message may merge with its first characters ("\n" with a
  // message that starts with newlines): keep only what ends in a special id, where no tokenizer
  // merges.
  while (!start.empty() && !tokenizer_.IsSpecial(start.back())) start.pop_back();
  return start;
}

Status JinjaChatFormat::Probe(const ChatFormatSource& source) {
  // The end of an assistant message: the first special id after its content.
  const std::vector<ChatMessage> exchange = {{Role::kUser, std::string(kProbeUser), ""},
                                             {Role::kAssistant, std::string(kProbeAssistant), ""}};
  StatusOr<std::string> closed = Render(std::nullopt, exchange, std::nullopt, false, {});
  if (!closed.ok()) return closed.status();
  std::optional<int32_t> end_of_turn;
  if (const size_t at = closed->rfind(kProbeAssistant); at != std::string::npos) {
    StatusOr<std::vector<int32_t>> tail = tokenizer_.EncodeRendered(std::string_view(*closed).substr(at + kProbeAssistant.size()));
    if (!tail.ok()) return tail.status();
    const auto special = std::find_if(tail->begin(), tail->end(), [&](int32_t id) { return tokenizer_.IsSpecial(id); });
    if (special != tail->end()) end_of_turn = *special;
  }
  // The template's end of turn first: the id a reply that must end (a constrained one) ends on.
  if (end_of_turn) stop_ids_.push_back(*end_of_turn);
  for (int32_t id : source.stop_ids) {
    if (!end_of_turn || id != *end_of_turn) stop_ids_.push_back(id);
  }
  if (stop_ids_.empty()) {
    return Status::InvalidArgument("the model has no stop ids and its chat template ends an assistant message "
                                   "with no special token: a reply could never end");
  }

  // Every special id of a whole conversation that does not end a reply is a role marker.
  StatusOr<std::string> conversation = Render(std::string(kProbeSystem), exchange, kProbeUserOther, true, {});
  if (!conversation.ok()) {
    // Some templates refuse a system message; their markers show without one.
    conversation = Render(std::nullopt, exchange, kProbeUserOther, true, {});
    if (!conversation.ok()) return conversation.status();
  }
  StatusOr<std::vector<int32_t>> ids = Encode(*conversation);
  if (!ids.ok()) return ids.status();
  std::set<int32_t> banned;
  for (int32_t id : *ids) {
    if (tokenizer_.IsSpecial(id) && std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) {
      banned.insert(id);
    }
  }
  banned_ids_.assign(banned.begin(), banned.end());
  const ReasoningTags tags;
  if (source.chat_template.find(tags.open) != std::string::npos ||
      source.chat_template.find(tags.close) != std::string::npos) {
    reasoning_tags_ = tags;
  }
  return Status::Ok();
}

}  // namespace niels::daemon::text
