// Fuzz target: the chat path of a template model with client-chosen messages -- JinjaChatFormat
// (daemon/text/jinja_chat_format.h) rendering and encoding a conversation, the context policy of a
// template chat turn that leaves out the oldest exchanges (ExchangesToDrop,
// daemon/engine/template_chat_turn.h), and the ReplySplitter (daemon/text/reply_splitter.h) over a
// model's output bytes.
//
// The templates are small ones of our own with the structure of the real ones (the real templates
// are third-party and stay out of the repository; chat_format_test checks nielsd against them):
//   0 "qwen3": a leading system message, the last real user query found by a namespace loop over
//     the messages in reverse, reasoning_content or a <think> block split off an assistant
//     content, think blocks only after the last query, tool results wrapped as a user turn, and
//     the empty think block for enable_thinking=false;
//   1 "llama3": bos_token, a system block with a date line (strftime_now) before the system
//     prompt, trimmed contents between header markers;
//   2 "chatml": the plain <|im_start|>role\ncontent<|im_end|> loop, whose rendering the harness
//     also writes itself; as 3, with free roles, it also renders the generic tool format's rewrite
//     of the conversation (CheckGeneric).
// Each runs on the tiny family tokenizer of its model (tests/support/family_model.h: Qwen's
// <|im_start|>, <|im_end|>, <|endoftext|> special and <think> not; Llama 3's header markers).
//
// Both model templates also render tools as the real ones do: Qwen3's `tools` block (each tool
// with tojson) and <tool_call> lines (arguments with tojson, or as they are when a string); Llama's
// tools in the system block with tojson(indent=4), a call as {"name", "parameters"} and a tool
// result as an ipython turn.
//
// Input: 5 header bytes, then records separated by 0x1E.
//   byte 0: bits 0-1 the template (3 is chatml too), bit 2 the first record is the system prompt,
//           bits 3-4 enable_thinking (1 true, 2 false, else unset), bit 5 free roles (each message
//           record's first byte picks its role, % 5: system, user, assistant, tool, or a tool
//           definition "name 0x1F description 0x1F parameters" that is not a message; an
//           assistant record is [reasoning 0x1F] content, then per tool call 0x1D name 0x1C
//           arguments; a tool record is [call id [0x1C name] 0x1F] result; no truncation runs;
//           bit 0 of byte 4 also renders the conversation without the new user message through
//           EncodeConversation, with the generation prompt when bit 1 is set),
//           bit 6 the reply starts in reasoning, bit 7 the splitter has no reasoning tags;
//   byte 1: the context, 8 + 2 x byte tokens; byte 2: max_new_tokens; byte 3: context_keep, /255;
//   byte 4: the seed of the cuts the reply is fed in.
// The last record is the model's reply (fed to the ReplySplitter), the one before it the user's new
// text (the reply's own record when there is only one); the records between are the conversation,
// user and assistant alternately (an assistant record is reasoning 0x1F answer when it has a
// 0x1F), an odd last one left out.
//
// Invariants:
//   - a render succeeds or fails with INVALID_ARGUMENT (invalid UTF-8, tool JSON nested too deep
//     or holding numbers out of range); it never runs out of a budget proportional to the input
//     (work 1024 per byte, output 256 per byte -- a message may be one byte of the input and its
//     header some 60, and Llama's indented tools take up to some 200 bytes per byte --, loop
//     iterations and list items 4 per byte, of the input's size rounded up to a power of two, plus
//     constants), and its output is at most 3 x input + 256 per message + 4 KiB bytes, plus 6
//     (Qwen3) or 200 (Llama) per byte of tool definitions and calls;
//   - contents are text, and so are the strings of tools and calls: the special ids EncodeTurn
//     writes are exactly those of the same conversation with every special-token literal taken
//     out of the contents, ids and names, and out of the strings of the parsed tool JSON (an escape
//     may spell a literal) (encoded with the literals parsed), and its ids decode (specials
//     included) to the rendered text, BOS first
//     when the tokenizer adds one (for Qwen's tokenizer, which normalizes to NFC, when the
//     rendering is ASCII); the chatml rendering is exactly the harness's own;
//   - truncation: ExchangesToDrop asks for at most 2 + ceil(log2(exchanges + 1)) renderings, leaves
//     out none when the conversation fits with the reply room, otherwise the chosen rendering fits
//     with the room and within keep x context (or every exchange is left out) and leaving out one
//     fewer would not; the chosen rendering is shorter than the context and still ends with the
//     user's new message and the generation prompt; a refusal is INVALID_ARGUMENT (the two checks
//     above run on the whole conversation and on the chosen rendering; the other candidates of
//     the search are only encoded, and fail only with INVALID_ARGUMENT);
//   - the ReplySplitter's parts fed in input-chosen cuts concatenate to Split() of the whole reply
//     (its header's contract); without tags everything is answer; each part is a piece of the
//     reply, and a reply that does not open with the tag (nor starts in reasoning) is all answer.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/engine/chat_turn.h"
#include "daemon/engine/template_chat_turn.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/generic_tool_format.h"
#include "daemon/text/jinja_chat_format.h"
#include "daemon/text/reply_splitter.h"
#include "daemon/text/tokenizer_config.h"
#include "daemon/text/tokenizer_json.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/family_model.h"

namespace text = niels::daemon::text;
namespace model = niels::daemon::model;
using niels::common::StatusCode;
using niels::common::StatusOr;

namespace {

constexpr const char* kQwen3Template = R"({%- set msgs = messages -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
  {%- if msgs and msgs[0].role == 'system' -%}
{{- msgs[0].content ~ '\n\n' -}}
  {%- endif -%}
{{- '# Tools\n<tools>' -}}
  {%- for tool in tools -%}
{{- '\n' ~ (tool | tojson) -}}
  {%- endfor -%}
{{- '\n</tools><|im_end|>\n' -}}
{%- elif msgs and msgs[0].role == 'system' -%}
{{- '<|im_start|>system\n' ~ msgs[0].content ~ '<|im_end|>\n' -}}
{%- endif -%}
{%- set st = namespace(pending_tools=true, last_user=msgs|length - 1) -%}
{%- for m in msgs[::-1] -%}
  {%- set at = msgs|length - 1 - loop.index0 -%}
  {%- if st.pending_tools and m.role == 'user' and not (m.content.startswith('<tool_response>') and m.content.endswith('</tool_response>')) -%}
    {%- set st.pending_tools = false -%}
    {%- set st.last_user = at -%}
  {%- endif -%}
{%- endfor -%}
{%- for m in msgs -%}
  {%- set body = m.content if m.content is string else '' -%}
  {%- if m.role == 'user' or (m.role == 'system' and not loop.first) -%}
{{- '<|im_start|>' ~ m.role ~ '\n' ~ body ~ '<|im_end|>\n' -}}
  {%- elif m.role == 'assistant' -%}
    {%- set thought = '' -%}
    {%- if m.reasoning_content is string -%}
      {%- set thought = m.reasoning_content -%}
    {%- elif '</think>' in body -%}
      {%- set thought = body.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
      {%- set body = body.split('</think>')[-1].lstrip('\n') -%}
    {%- endif -%}
    {%- if loop.index0 > st.last_user and (loop.last or thought) -%}
{{- '<|im_start|>assistant\n<think>\n' ~ thought.strip('\n') ~ '\n</think>\n\n' ~ body.lstrip('\n') -}}
    {%- else -%}
{{- '<|im_start|>assistant\n' ~ body -}}
    {%- endif -%}
    {%- if m.tool_calls is defined -%}
      {%- for call in m.tool_calls -%}
        {%- set f = call.function if call.function is defined else call -%}
{{- '\n<tool_call>\n{"name": "' ~ f.name ~ '", "arguments": ' -}}
{{- f.arguments if f.arguments is string else f.arguments | tojson -}}
{{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
{{- '<|im_end|>\n' -}}
  {%- elif m.role == 'tool' -%}
{{- '<|im_start|>user\n<tool_response>\n' ~ body ~ '\n</tool_response><|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
  {%- endif -%}
{%- endif -%})";

constexpr const char* kLlama3Template = R"({{- bos_token -}}
{%- if messages[0].role == 'system' -%}
  {%- set system_text = messages[0].content | trim -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_text = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' -}}
{%- if tools is not none -%}
{{- 'Environment: ipython\n' -}}
{%- endif -%}
{{- 'Cutting Knowledge Date: December 2023\nToday Date: ' ~ strftime_now('%d %b %Y') ~ '\n\n' -}}
{%- if tools is not none -%}
  {%- for t in tools -%}
{{- t | tojson(indent=4) ~ '\n\n' -}}
  {%- endfor -%}
{%- endif -%}
{{- system_text ~ '<|eot_id|>' -}}
{%- for m in turns -%}
  {%- if 'tool_calls' in m -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
    {%- for call in m.tool_calls -%}
{{- '{"name": "' ~ call.function.name ~ '", "parameters": ' ~ (call.function.arguments | tojson) ~ '}' -}}
    {%- endfor -%}
{{- '<|eot_id|>' -}}
  {%- elif m.role == 'tool' -%}
{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' -}}
{{- (m.content if m.content is string else m.content | tojson) ~ '<|eot_id|>' -}}
  {%- else -%}
{{- '<|start_header_id|>' ~ m.role ~ '<|end_header_id|>\n\n' ~ (m.content | trim) ~ '<|eot_id|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%})";

constexpr const char* kChatMlTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

enum TemplateKind { kQwen3 = 0, kLlama3 = 1, kChatMl = 2 };

struct FamilyTokenizer {
  std::unique_ptr<text::BpeTokenizer> tokenizer;
  text::SpecialTokenIds special;
  std::vector<std::string> special_literals;  // the text of every special (control) id
};

FamilyTokenizer MakeTokenizer(model::Architecture architecture) {
  const model::ModelConfig config = niels::testing::TinyFamilyConfig(architecture);
  const niels::testing::HfModelFiles files =
      niels::testing::MakeHfModel(config, niels::testing::TinyFamilyWeights(config, 1));
  StatusOr<text::BpeSpec> spec = text::BpeSpecFromTokenizerJson(files.tokenizer.dump(), "tokenizer.json");
  FUZZ_CHECK(spec.ok());
  FUZZ_CHECK(text::ApplyTokenizerConfigJson(files.tokenizer_config.dump(), "tokenizer_config.json", &*spec).ok());
  FamilyTokenizer out;
  out.special = spec->special;
  StatusOr<std::unique_ptr<text::BpeTokenizer>> made = text::BpeTokenizer::Create(std::move(spec).value());
  FUZZ_CHECK(made.ok());
  out.tokenizer = std::move(made).value();
  for (int32_t id = 0; id < out.tokenizer->vocab_size(); ++id) {
    if (out.tokenizer->IsSpecial(id)) out.special_literals.push_back(out.tokenizer->Piece(id));
  }
  FUZZ_CHECK(!out.special_literals.empty());
  return out;
}

const FamilyTokenizer& Tokenizer(TemplateKind kind) {
  static const FamilyTokenizer* qwen = new FamilyTokenizer(MakeTokenizer(model::Architecture::kQwen3));
  static const FamilyTokenizer* llama = new FamilyTokenizer(MakeTokenizer(model::Architecture::kLlama));
  return kind == kLlama3 ? *llama : *qwen;
}

// The budgets of a render for an input of at most `bucket` bytes.
text::JinjaChatFormatOptions FormatOptions(size_t bucket) {
  text::JinjaChatFormatOptions options;
  options.limits.max_work = static_cast<int64_t>(1024 * bucket + 200'000);
  // Llama's tools are written with tojson(indent=4): a value nested d deep takes a line of 4 d
  // spaces, up to some 200 bytes per byte of a tool's parameters at the nesting limit.
  options.limits.max_output_bytes = 256 * bucket + 16'384;
  options.limits.max_list_items = 4 * bucket + 64;
  options.limits.max_loop_iterations = static_cast<int64_t>(4 * bucket + 64);
  options.limits.max_call_depth = 8;
  options.now = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1795000000)); };
  return options;
}

// The format of `kind` whose budgets are those of an input of `size` bytes (made once per power
// of two).
const text::JinjaChatFormat& Format(TemplateKind kind, size_t size) {
  static auto* formats = new std::map<std::pair<int, int>, std::unique_ptr<text::JinjaChatFormat>>();
  const int width = static_cast<int>(std::bit_width(size));
  auto& slot = (*formats)[{kind, width}];
  if (!slot) {
    const FamilyTokenizer& family = Tokenizer(kind);
    text::ChatFormatSource source;
    source.tokenizer = family.tokenizer.get();
    source.chat_template = kind == kQwen3 ? kQwen3Template : kind == kLlama3 ? kLlama3Template : kChatMlTemplate;
    if (family.special.eos) source.stop_ids.push_back(*family.special.eos);
    if (family.special.bos) source.bos_token = family.tokenizer->Piece(*family.special.bos);
    if (family.special.eos) source.eos_token = family.tokenizer->Piece(*family.special.eos);
    if (family.special.add_bos && family.special.bos) source.add_bos_id = family.special.bos;
    auto made = text::JinjaChatFormat::Create(source, FormatOptions(size_t{1} << width));
    if (!made.ok()) {
      std::fprintf(stderr, "chat_format_fuzz: %s\n", made.status().ToString().c_str());
      std::abort();
    }
    slot = std::move(made).value();
  }
  return *slot;
}

// The text of `rest` up to the first `separator` (all of it when there is none), taken off `rest`.
std::string_view TakeField(std::string_view& rest, char separator) {
  const size_t at = rest.find(separator);
  const std::string_view field = rest.substr(0, at);
  rest.remove_prefix(at == std::string_view::npos ? rest.size() : at + 1);
  return field;
}

std::vector<std::string_view> SplitRecords(std::string_view rest) {
  std::vector<std::string_view> records;
  for (;;) {
    const size_t at = rest.find('\x1e');
    records.push_back(rest.substr(0, at));
    if (at == std::string_view::npos) break;
    rest.remove_prefix(at + 1);
  }
  return records;
}

// `content` with every special-token literal taken out (repeatedly: taking one out may join two
// halves of another).
std::string WithoutLiterals(std::string content, const std::vector<std::string>& literals) {
  for (bool changed = true; changed;) {
    changed = false;
    for (const std::string& literal : literals) {
      for (size_t at = content.find(literal); at != std::string::npos; at = content.find(literal, at)) {
        content.replace(at, literal.size(), "#");
        changed = true;
      }
    }
  }
  return content;
}

// WithoutLiterals on every string (keys included) of a JSON value.
nlohmann::ordered_json JsonValueWithoutLiterals(const nlohmann::ordered_json& value,
                                                const std::vector<std::string>& literals) {
  if (value.is_string()) return WithoutLiterals(value.get<std::string>(), literals);
  if (value.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : value) out.push_back(JsonValueWithoutLiterals(item, literals));
    return out;
  }
  if (value.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [key, item] : value.items()) out[WithoutLiterals(key, literals)] = JsonValueWithoutLiterals(item, literals);
    return out;
  }
  return value;
}

// A call's arguments or a tool's parameters without literals: in the strings of the parsed JSON
// (where an escape may spell one), or in the text when it is not JSON (the template gets it as a
// string). Only called after the format rendered `text`, so it nests within kMaxToolJsonDepth.
std::string JsonWithoutLiterals(const std::string& text, const std::vector<std::string>& literals) {
  const nlohmann::ordered_json value = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return WithoutLiterals(text, literals);
  return JsonValueWithoutLiterals(value, literals).dump();
}

std::vector<int32_t> SpecialIds(const std::vector<int32_t>& ids, const text::Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    if (tokenizer.IsSpecial(id)) out.push_back(id);
  }
  return out;
}

struct Conversation {
  std::optional<std::string> system;
  std::vector<text::ChatMessage> messages;
  std::string user;
  text::ChatOptions options;
};

// The chatml rendering, written here.
std::string ChatMlRendering(const Conversation& c, std::span<const text::ChatMessage> messages) {
  std::string out;
  auto add = [&](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  if (c.system) add("system", *c.system);
  for (const text::ChatMessage& m : messages) add(text::RoleName(m.role), m.content);
  add("user", c.user);
  return out + "<|im_start|>assistant\n";
}

void CheckFailure(const niels::common::Status& status) {
  FUZZ_CHECK(!status.ok());
  FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument);  // never RESOURCE_EXHAUSTED: the budget is linear
  FUZZ_CHECK(!status.message().empty());
}

bool HasLiteral(std::string_view content, const std::vector<std::string>& literals) {
  for (const std::string& literal : literals) {
    if (content.find(literal) != std::string_view::npos) return true;
  }
  return false;
}

// The bytes of the conversation's tool definitions and calls (which templates write with tojson).
size_t ToolJsonBytes(const Conversation& c, std::span<const text::ChatMessage> messages) {
  size_t bytes = 0;
  if (c.options.tools) {
    for (const text::ToolDefinition& tool : *c.options.tools) {
      bytes += tool.name.size() + tool.description.size() + tool.parameters.size() + 8;
    }
  }
  for (const text::ChatMessage& m : messages) {
    for (const text::ToolCall& call : m.tool_calls) bytes += call.name.size() + call.arguments.size() + 8;
  }
  return bytes;
}

// Renders and encodes `messages` (a suffix of the conversation's); checks the render's size and
// that contents stay text. The prompt's length, or the failure; *text the rendering.
StatusOr<int64_t> CheckTurn(TemplateKind kind, const text::JinjaChatFormat& format, const Conversation& c,
                            std::span<const text::ChatMessage> messages, size_t input_size, std::string* text) {
  const FamilyTokenizer& family = Tokenizer(kind);
  StatusOr<std::string> rendered = format.Render(c.system, messages, c.user, true, c.options);
  StatusOr<text::ChatPrompt> prompt = format.EncodeTurn(c.system, messages, c.user, c.options);
  if (!rendered.ok() || !prompt.ok()) {
    FUZZ_CHECK(!rendered.ok() && !prompt.ok());
    CheckFailure(rendered.status());
    CheckFailure(prompt.status());
    return prompt.status();
  }
  // Tool JSON grows when written again: a number's Python spelling ("1e15" is
  // 1000000000000000.0), ", " and ": " separators, \u escapes of control characters in names and
  // descriptions, and Llama's indent (ToolJsonBytes).
  FUZZ_CHECK(rendered->size() <= 3 * input_size + 256 * (messages.size() + 2) + 4096 +
                                     (kind == kLlama3 ? 200 : 6) * ToolJsonBytes(c, messages));
  if (kind == kChatMl) FUZZ_CHECK(*rendered == ChatMlRendering(c, messages));

  // Every id decodes to its own bytes: the ids spell the rendering (after a BOS the format added;
  // Qwen's tokenizer encodes the NFC form, the same text when it is ASCII).
  const bool normalizes = kind != kLlama3;
  const bool ascii = std::all_of(rendered->begin(), rendered->end(), [](char ch) { return (ch & 0x80) == 0; });
  std::string spelled = family.tokenizer->Decode(prompt->ids, /*skip_special=*/false);
  if (family.special.add_bos && family.special.bos && !rendered->starts_with(family.tokenizer->Piece(*family.special.bos))) {
    FUZZ_CHECK(!prompt->ids.empty() && prompt->ids.front() == *family.special.bos);
    spelled.erase(0, family.tokenizer->Piece(*family.special.bos).size());
  }
  if (!normalizes || ascii) FUZZ_CHECK(spelled == *rendered);

  *text = *rendered;

  // The template's own special ids, and no others: those of the conversation without literals
  // (the same conversation when no content has one).
  // (Always compared when there are tools or calls: a JSON escape such as \u003c can spell a
  // literal that only the parsed value holds.)
  bool literals = (c.system && HasLiteral(*c.system, family.special_literals)) ||
                  HasLiteral(c.user, family.special_literals) || (c.options.tools && !c.options.tools->empty());
  for (const text::ChatMessage& m : messages) {
    literals = literals || HasLiteral(m.content, family.special_literals) ||
               HasLiteral(m.reasoning, family.special_literals) || !m.tool_calls.empty() ||
               HasLiteral(m.tool_call_id, family.special_literals) || HasLiteral(m.name, family.special_literals);
  }
  if (!literals) return static_cast<int64_t>(prompt->ids.size());
  const auto& all = family.special_literals;
  Conversation plain = c;
  if (plain.system) plain.system = WithoutLiterals(*plain.system, all);
  std::vector<text::ChatMessage> plain_messages(messages.begin(), messages.end());
  for (text::ChatMessage& m : plain_messages) {
    m.content = WithoutLiterals(m.content, all);
    m.reasoning = WithoutLiterals(m.reasoning, all);
    m.tool_call_id = WithoutLiterals(m.tool_call_id, all);
    m.name = WithoutLiterals(m.name, all);
    for (text::ToolCall& call : m.tool_calls) {
      call.id = WithoutLiterals(call.id, all);
      call.name = WithoutLiterals(call.name, all);
      call.arguments = JsonWithoutLiterals(call.arguments, all);
    }
  }
  if (c.options.tools) {
    auto tools = std::make_shared<std::vector<text::ToolDefinition>>(*c.options.tools);
    for (text::ToolDefinition& tool : *tools) {
      tool.name = WithoutLiterals(tool.name, all);
      tool.description = WithoutLiterals(tool.description, all);
      tool.parameters = JsonWithoutLiterals(tool.parameters, all);
    }
    plain.options.tools = std::move(tools);
  }
  plain.user = WithoutLiterals(plain.user, all);
  StatusOr<std::string> plain_rendered = format.Render(plain.system, plain_messages, plain.user, true, plain.options);
  FUZZ_CHECK(plain_rendered.ok());
  StatusOr<std::vector<int32_t>> plain_ids = format.Encode(*plain_rendered);
  FUZZ_CHECK(plain_ids.ok());
  FUZZ_CHECK(SpecialIds(prompt->ids, *family.tokenizer) == SpecialIds(*plain_ids, *family.tokenizer));
  return static_cast<int64_t>(prompt->ids.size());
}

// The conversation without a new user message (it ends in its last tool result or reply):
// Render and EncodeConversation agree, the ids spell the rendering, a failure is INVALID_ARGUMENT.
// The generic tool format (text/generic_tool_format.h) of a free-roles conversation: the rewrite
// leaves no tool message and no call, its text is at most 6 x the conversation's (a control
// character's \u escape) plus 64 bytes per message and tool and 1 KiB (the tool block's words), and
// the chatml rendering of the rewrite holds every CheckTurn invariant.
void CheckGeneric(const Conversation& c, size_t size) {
  const text::RewrittenConversation rewritten =
      text::GenericToolConversation(c.system, c.messages, c.options.tools.get());
  size_t in_bytes = c.system ? c.system->size() : 0;
  size_t out_bytes = rewritten.system_prompt ? rewritten.system_prompt->size() : 0;
  size_t pieces = c.messages.size();
  for (const text::ChatMessage& m : c.messages) {
    in_bytes += m.content.size() + m.reasoning.size() + m.name.size();
    for (const text::ToolCall& call : m.tool_calls) in_bytes += call.name.size() + call.arguments.size();
    pieces += m.tool_calls.size();
  }
  if (c.options.tools) {
    for (const text::ToolDefinition& tool : *c.options.tools) {
      in_bytes += tool.name.size() + tool.description.size() + tool.parameters.size();
      ++pieces;
    }
  }
  for (const text::ChatMessage& m : rewritten.messages) {
    FUZZ_CHECK(m.role != text::Role::kTool && m.tool_calls.empty());
    out_bytes += m.content.size() + m.reasoning.size();
  }
  FUZZ_CHECK(rewritten.messages.size() <= c.messages.size());
  FUZZ_CHECK(out_bytes <= 6 * in_bytes + 64 * pieces + 1024);
  Conversation plain = c;
  plain.system = rewritten.system_prompt;
  plain.messages = rewritten.messages;
  plain.options.tools = nullptr;
  const size_t grown = 8 * size + 2048;
  std::string rendered;
  (void)CheckTurn(kChatMl, Format(kChatMl, grown), plain, plain.messages, grown, &rendered);
}

void CheckConversation(TemplateKind kind, const text::JinjaChatFormat& format, const Conversation& c,
                       bool add_generation_prompt) {
  const FamilyTokenizer& family = Tokenizer(kind);
  StatusOr<std::string> rendered = format.Render(c.system, c.messages, std::nullopt, add_generation_prompt, c.options);
  StatusOr<text::ChatPrompt> prompt = format.EncodeConversation(c.system, c.messages, add_generation_prompt, c.options);
  if (!rendered.ok() || !prompt.ok()) {
    FUZZ_CHECK(!rendered.ok() && !prompt.ok());
    CheckFailure(rendered.status());
    CheckFailure(prompt.status());
    return;
  }
  const bool ascii = std::all_of(rendered->begin(), rendered->end(), [](char ch) { return (ch & 0x80) == 0; });
  std::string spelled = family.tokenizer->Decode(prompt->ids, /*skip_special=*/false);
  if (family.special.add_bos && family.special.bos && !rendered->starts_with(family.tokenizer->Piece(*family.special.bos))) {
    FUZZ_CHECK(!prompt->ids.empty() && prompt->ids.front() == *family.special.bos);
    spelled.erase(0, family.tokenizer->Piece(*family.special.bos).size());
  }
  if (kind == kLlama3 || ascii) FUZZ_CHECK(spelled == *rendered);
  if (kind == kChatMl) {
    std::string want = ChatMlRendering(c, c.messages);  // ... user turn, generation prompt
    want.resize(want.size() - std::string("<|im_start|>user\n" + c.user + "<|im_end|>\n<|im_start|>assistant\n").size());
    if (add_generation_prompt) want += "<|im_start|>assistant\n";
    FUZZ_CHECK(*rendered == want);
  }
}

// The chosen rendering still ends with the user's new message and the generation prompt.
void CheckEndsWithUser(TemplateKind kind, const std::string& rendered, const Conversation& c) {
  if (kind == kChatMl || kind == kQwen3) {
    const std::string turn = "<|im_start|>user\n" + c.user + "<|im_end|>\n<|im_start|>assistant\n";
    const std::string thinking_off = turn + "<think>\n\n</think>\n\n";
    const bool off = c.options.enable_thinking == false && kind == kQwen3;
    FUZZ_CHECK(rendered.ends_with(off ? thinking_off : turn));
    return;
  }
  FUZZ_CHECK(rendered.ends_with("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
  // trim: the text between the last user header and the end of its turn holds the user's text
  // without its surrounding whitespace (checked when it starts and ends with printable ASCII).
  std::string_view core = c.user;
  while (!core.empty() && (core.front() == ' ' || (core.front() >= '\t' && core.front() <= '\r'))) core.remove_prefix(1);
  while (!core.empty() && (core.back() == ' ' || (core.back() >= '\t' && core.back() <= '\r'))) core.remove_suffix(1);
  if (core.empty() || core.front() < 0x21 || core.front() > 0x7e || core.back() < 0x21 || core.back() > 0x7e) return;
  const size_t header = rendered.rfind("<|start_header_id|>user<|end_header_id|>\n\n" + std::string(core) + "<|eot_id|>");
  FUZZ_CHECK(header != std::string::npos);
}

void CheckTruncation(TemplateKind kind, const text::JinjaChatFormat& format, const Conversation& c, size_t input_size,
                     int64_t context, int32_t max_new_tokens, double keep) {
  const size_t exchanges = c.messages.size() / 2;
  std::map<size_t, StatusOr<int64_t>> asked;
  std::map<size_t, std::string> rendered;
  int calls = 0;
  const auto tokens_without = [&](size_t drop) -> StatusOr<int64_t> {
    FUZZ_CHECK(drop <= exchanges);
    ++calls;
    auto it = asked.find(drop);
    if (it == asked.end()) {
      // The whole conversation is checked in full; the other candidates only encoded (one render
      // each), and the chosen one checked in full below.
      const auto kept = std::span(c.messages).subspan(2 * drop);
      if (drop == 0) {
        it = asked.emplace(drop, CheckTurn(kind, format, c, kept, input_size, &rendered[drop])).first;
      } else {
        StatusOr<text::ChatPrompt> prompt = format.EncodeTurn(c.system, kept, c.user, c.options);
        if (!prompt.ok()) CheckFailure(prompt.status());
        it = asked.emplace(drop, prompt.ok() ? StatusOr<int64_t>(static_cast<int64_t>(prompt->ids.size()))
                                             : StatusOr<int64_t>(prompt.status())).first;
      }
    }
    return it->second;
  };
  const int64_t room = niels::daemon::engine::ChatReplyRoom(max_new_tokens, context);
  StatusOr<size_t> dropped = niels::daemon::engine::ExchangesToDrop(tokens_without, exchanges, 0, room, context, keep);
  FUZZ_CHECK(calls <= 2 + static_cast<int>(std::bit_width(exchanges + 1)));
  if (!dropped.ok()) {
    CheckFailure(dropped.status());
    return;
  }
  const size_t drop = *dropped;
  FUZZ_CHECK(drop <= exchanges);
  const int64_t kept = *asked.at(drop);
  FUZZ_CHECK(kept < context);
  const int64_t low_water = static_cast<int64_t>(std::min(std::max(keep, 0.0), 1.0) * static_cast<double>(context));
  const int64_t all = *asked.at(0);
  if (all + room <= context) {
    FUZZ_CHECK(drop == 0);
  } else if (drop < exchanges) {
    FUZZ_CHECK(drop > 0 && kept + room <= context && kept <= low_water);
  }
  if (drop > 0) {
    // One fewer left out would not do (it was asked, or it is the whole conversation).
    const auto fewer = asked.find(drop - 1);
    FUZZ_CHECK(fewer != asked.end() && fewer->second.ok());
    const int64_t length = *fewer->second;
    FUZZ_CHECK(length + room > context || (drop - 1 > 0 && length > low_water));
  }
  if (drop != 0) {
    const StatusOr<int64_t> checked =
        CheckTurn(kind, format, c, std::span(c.messages).subspan(2 * drop), input_size, &rendered[drop]);
    FUZZ_CHECK(checked.ok() && *checked == kept);
  }
  CheckEndsWithUser(kind, rendered.at(drop), c);
}

// ReplySplitter over `reply` fed in cuts chosen by `seed`.
void CheckReplySplitter(std::string_view reply, bool with_tags, bool starts_in_reasoning, uint8_t seed) {
  std::optional<text::ReasoningTags> tags;
  if (with_tags) tags = text::ReasoningTags{};
  const text::ReplyDelta whole = text::ReplySplitter::Split(reply, tags, starts_in_reasoning);
  text::ReplySplitter splitter(tags, starts_in_reasoning);
  niels::fuzz::Rng rng(seed);
  text::ReplyDelta fed;
  for (size_t at = 0; at < reply.size();) {
    const size_t n = std::min<size_t>(reply.size() - at, rng.Between(0, seed % 4 == 0 ? 1 : 12));
    const text::ReplyDelta delta = splitter.Add(reply.substr(at, n));
    fed.answer += delta.answer;
    fed.reasoning += delta.reasoning;
    at += n;
  }
  const text::ReplyDelta rest = splitter.Finish();
  fed.answer += rest.answer;
  fed.reasoning += rest.reasoning;
  FUZZ_CHECK(fed.answer == whole.answer && fed.reasoning == whole.reasoning);
  FUZZ_CHECK(whole.answer.size() + whole.reasoning.size() <= reply.size());
  FUZZ_CHECK(reply.find(whole.answer) != std::string_view::npos);
  FUZZ_CHECK(reply.find(whole.reasoning) != std::string_view::npos);
  if (!tags) {
    FUZZ_CHECK(whole.answer == reply && whole.reasoning.empty());
    return;
  }
  std::string_view lead = reply;
  while (!lead.empty() && (lead.front() == ' ' || lead.front() == '\n' || lead.front() == '\t' || lead.front() == '\r')) {
    lead.remove_prefix(1);
  }
  if (!starts_in_reasoning && !lead.starts_with(tags->open) && tags->open.starts_with(lead) == false) {
    FUZZ_CHECK(whole.answer == reply && whole.reasoning.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t flags = in.U8();
  const int64_t context = 8 + 2 * static_cast<int64_t>(in.U8());
  const int32_t max_new_tokens = in.U8();
  const double keep = in.U8() / 255.0;
  const uint8_t seed = in.U8();
  const auto kind = static_cast<TemplateKind>(std::min(flags & 3, 2));
  const std::vector<std::string_view> records = SplitRecords(in.Rest());

  const std::string_view reply = records.back();
  CheckReplySplitter(reply, (flags & 0x80) == 0, (flags & 0x40) != 0, seed);

  Conversation c;
  size_t first = 0;
  if ((flags & 4) && records.size() > 1) c.system = std::string(records[first++]);
  const size_t user_at = records.size() >= 2 ? records.size() - 2 : 0;
  c.user = std::string(records[std::max(user_at, first)]);
  const bool free_roles = (flags & 0x20) != 0;
  int calls_made = 0;
  auto tools = std::make_shared<std::vector<text::ToolDefinition>>();
  for (size_t i = first; i < user_at; ++i) {
    std::string_view record = records[i];
    text::ChatMessage m;
    if (free_roles) {
      const uint8_t pick = record.empty() ? 0 : static_cast<uint8_t>(record.front()) % 5;
      if (!record.empty()) record.remove_prefix(1);
      if (pick == 4) {  // a tool definition: name 0x1F description 0x1F parameters
        text::ToolDefinition tool;
        tool.name = std::string(TakeField(record, '\x1f'));
        tool.description = std::string(TakeField(record, '\x1f'));
        tool.parameters = std::string(record);
        tools->push_back(std::move(tool));
        continue;
      }
      m.role = pick == 0 ? text::Role::kSystem : pick == 1 ? text::Role::kUser
               : pick == 2                   ? text::Role::kAssistant
                                             : text::Role::kTool;
    } else {
      m.role = (i - first) % 2 == 0 ? text::Role::kUser : text::Role::kAssistant;
    }
    if (m.role == text::Role::kAssistant) {
      if (const size_t cut = record.find('\x1f'); cut != std::string_view::npos) {
        m.reasoning = std::string(record.substr(0, cut));
        record.remove_prefix(cut + 1);
      }
      // Free roles: content, then per call 0x1D name 0x1C arguments.
      if (const size_t cut = record.find('\x1d'); free_roles && cut != std::string_view::npos) {
        std::string_view calls = record.substr(cut + 1);
        record = record.substr(0, cut);
        for (bool more = true; more;) {
          more = calls.find('\x1d') != std::string_view::npos;
          std::string_view call = TakeField(calls, '\x1d');
          text::ToolCall tool_call;
          tool_call.id = "call_" + std::to_string(calls_made++);
          tool_call.name = std::string(TakeField(call, '\x1c'));
          tool_call.arguments = std::string(call);
          m.tool_calls.push_back(std::move(tool_call));
        }
      }
    }
    if (m.role == text::Role::kTool) {  // [id [0x1C name] 0x1F] content
      if (const size_t cut = record.find('\x1f'); cut != std::string_view::npos) {
        std::string_view id = record.substr(0, cut);
        record.remove_prefix(cut + 1);
        m.tool_call_id = std::string(TakeField(id, '\x1c'));
        m.name = std::string(id);
      }
    }
    m.content = std::string(record);
    c.messages.push_back(std::move(m));
  }
  if (!free_roles && c.messages.size() % 2 == 1) c.messages.pop_back();
  if (!tools->empty()) c.options.tools = std::move(tools);
  switch ((flags >> 3) & 3) {
    case 1: c.options.enable_thinking = true; break;
    case 2: c.options.enable_thinking = false; break;
    default: break;
  }

  const text::JinjaChatFormat& format = Format(kind, size);
  if (free_roles) {
    std::string rendered;
    (void)CheckTurn(kind, format, c, c.messages, size, &rendered);
    if (seed & 1) CheckConversation(kind, format, c, (seed & 2) != 0);
    if ((flags & 3) == 3) CheckGeneric(c, size);
  } else {
    CheckTruncation(kind, format, c, size, context, max_new_tokens, keep);
  }
  return 0;
}
