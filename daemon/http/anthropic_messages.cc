#include "daemon/http/anthropic_messages.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/wire_status.h"
#include "daemon/http/bound_session.h"
#include "daemon/http/ephemeral_session.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/openai_common.h"

namespace niels::daemon::http {
namespace {

using nlohmann::json;

// Text blocks of one message (or of `system`) are joined by a blank line.
constexpr const char* kBlockSeparator = "\n\n";

void AppendText(std::string* text, const std::string& more) {
  if (!text->empty()) *text += kBlockSeparator;
  *text += more;
}

// The blocks of a content array, each checked to be an object with a string `type`; calls
// `on_block(reader, type, name)` for each until it or a read fails.
template <typename OnBlock>
void ForEachBlock(FieldReader& fields, const json& blocks, std::string_view field, OnBlock&& on_block) {
  for (size_t i = 0; i < blocks.size() && !fields.failed(); ++i) {
    const json& block = blocks[i];
    const std::string name = fmt::format("{}[{}]", field, i);
    if (!block.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(block)));
      return;
    }
    FieldReader block_fields = fields.Nested(block, fields.Name(name) + ".");
    std::optional<std::string> type = block_fields.String("type");
    if (!type) {
      if (!block_fields.failed()) block_fields.Fail("type", "is required");
      return;
    }
    on_block(block_fields, *type);
  }
}

// A required string field of a block.
std::optional<std::string> RequiredString(FieldReader& fields, std::string_view name) {
  std::optional<std::string> value = fields.String(name);
  if (!value && !fields.failed()) fields.Fail(name, "is required");
  return value;
}

// `system`: a string or an array of text blocks.
void ReadSystem(FieldReader& fields, MessagesPlan* plan) {
  const json* system = fields.Get("system");
  if (system == nullptr) return;
  if (system->is_string()) {
    plan->create.set_system_prompt(system->get<std::string>());
    return;
  }
  if (!system->is_array()) {
    fields.Fail("system", fmt::format("must be a string or an array of text blocks, not {}", JsonTypeName(*system)));
    return;
  }
  std::string text;
  ForEachBlock(fields, *system, "system", [&](FieldReader& block, const std::string& type) {
    if (type != "text") {
      block.Fail("type", fmt::format("'{}' is not a system block type: only \"text\" is", type));
      return;
    }
    if (std::optional<std::string> part = RequiredString(block, "text")) AppendText(&text, *part);
  });
  if (!fields.failed()) plan->create.set_system_prompt(text);
}

// A tool_result block's `content`: a string or an array of text blocks.
std::string ReadToolResultContent(FieldReader& fields) {
  const json* content = fields.Get("content");
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    fields.Fail("content", fmt::format("must be a string or an array of text blocks, not {}", JsonTypeName(*content)));
    return "";
  }
  std::string text;
  ForEachBlock(fields, *content, "content", [&](FieldReader& block, const std::string& type) {
    if (type != "text") {
      block.Fail("type", fmt::format("'{}' is not supported in a tool result: only \"text\" blocks are", type));
      return;
    }
    if (std::optional<std::string> part = RequiredString(block, "text")) AppendText(&text, *part);
  });
  return text;
}

// What the conversation's messages became, and the names of the tool_use ids seen so far.
struct MessagesConversation {
  std::vector<niels::v1::ChatMessage> messages;
  std::map<std::string, std::string, std::less<>> tool_names;  // tool_use id -> tool name
};

niels::v1::ChatMessage NewMessage(const char* role, std::string content = "") {
  niels::v1::ChatMessage message;
  message.set_role(role);
  message.set_content(std::move(content));
  return message;
}

void ReadUserMessage(FieldReader& fields, const json& content, MessagesConversation* conversation) {
  if (content.is_string()) {
    conversation->messages.push_back(NewMessage("user", content.get<std::string>()));
    return;
  }
  std::string text;
  bool has_text = false;
  auto flush_text = [&] {
    if (!has_text) return;
    conversation->messages.push_back(NewMessage("user", std::move(text)));
    text.clear();
    has_text = false;
  };
  ForEachBlock(fields, content, "content", [&](FieldReader& block, const std::string& type) {
    if (type == "text") {
      std::optional<std::string> part = RequiredString(block, "text");
      if (!part) return;
      AppendText(&text, *part);
      has_text = true;
    } else if (type == "tool_result") {
      std::optional<std::string> id = RequiredString(block, "tool_use_id");
      if (!id) return;
      std::string result = ReadToolResultContent(block);
      (void)block.Bool("is_error");  // type-checked; the result's text is what the model sees
      if (block.failed()) return;
      flush_text();
      niels::v1::ChatMessage message = NewMessage("tool", std::move(result));
      message.set_tool_call_id(*id);
      if (auto it = conversation->tool_names.find(*id); it != conversation->tool_names.end()) {
        message.set_name(it->second);
      }
      conversation->messages.push_back(std::move(message));
    } else {
      block.Fail("type", fmt::format("'{}' is not supported in a user message: only \"text\" and \"tool_result\" "
                                     "blocks are",
                                     type));
    }
  });
  flush_text();
}

void ReadAssistantMessage(FieldReader& fields, const json& content, MessagesConversation* conversation) {
  niels::v1::ChatMessage message = NewMessage("assistant");
  if (content.is_string()) {
    message.set_content(content.get<std::string>());
    conversation->messages.push_back(std::move(message));
    return;
  }
  std::string text;
  std::string reasoning;
  ForEachBlock(fields, content, "content", [&](FieldReader& block, const std::string& type) {
    if (type == "text") {
      if (std::optional<std::string> part = RequiredString(block, "text")) AppendText(&text, *part);
    } else if (type == "thinking") {
      if (std::optional<std::string> part = RequiredString(block, "thinking")) AppendText(&reasoning, *part);
    } else if (type == "redacted_thinking") {
      // Opaque (another server's encrypted reasoning): nothing nielsd can render.
    } else if (type == "tool_use") {
      std::optional<std::string> id = RequiredString(block, "id");
      std::optional<std::string> name = id ? RequiredString(block, "name") : std::nullopt;
      const json* input = name ? block.Object("input") : nullptr;
      if (name && input == nullptr && !block.failed()) block.Fail("input", "is required");
      if (block.failed()) return;
      niels::v1::ToolCall* call = message.add_tool_calls();
      call->set_id(*id);
      call->set_name(*name);
      call->set_arguments(Dump(*input));
      conversation->tool_names[*id] = *name;
    } else {
      block.Fail("type", fmt::format("'{}' is not supported in an assistant message: only \"text\", \"thinking\", "
                                     "\"redacted_thinking\" and \"tool_use\" blocks are",
                                     type));
    }
  });
  message.set_content(std::move(text));
  message.set_reasoning(std::move(reasoning));
  conversation->messages.push_back(std::move(message));
}

void ReadAnthropicMessages(FieldReader& fields, MessagesPlan* plan) {
  const json* messages = fields.NonEmptyArray("messages");
  if (messages == nullptr) return;
  MessagesConversation conversation;
  for (size_t i = 0; i < messages->size() && !fields.failed(); ++i) {
    const json& entry = (*messages)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!entry.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(entry)));
      return;
    }
    FieldReader message_fields = fields.Nested(entry, name + ".");
    std::optional<std::string> role = RequiredString(message_fields, "role");
    if (!role) return;
    if (*role != "user" && *role != "assistant") {
      message_fields.Fail("role", fmt::format("'{}' is not one of user, assistant", *role));
      return;
    }
    const json* content = message_fields.Get("content");
    if (content == nullptr) {
      message_fields.Fail("content", "is required");
      return;
    }
    if (!content->is_string() && !content->is_array()) {
      message_fields.Fail("content",
                          fmt::format("must be a string or an array of content blocks, not {}", JsonTypeName(*content)));
      return;
    }
    if (content->is_array() && content->empty()) {
      message_fields.Fail("content", "must not be an empty array");
      return;
    }
    if (*role == "user") {
      ReadUserMessage(message_fields, *content, &conversation);
    } else {
      ReadAssistantMessage(message_fields, *content, &conversation);
    }
  }
  if (fields.failed()) return;
  if (conversation.messages.size() == 1 && conversation.messages[0].role() == "user" &&
      !conversation.messages[0].content().empty()) {
    plan->chat.set_user_text(conversation.messages[0].content());
    return;
  }
  for (niels::v1::ChatMessage& message : conversation.messages) *plan->chat.add_messages() = std::move(message);
}

void ReadAnthropicTools(FieldReader& fields, MessagesPlan* plan) {
  const json* tools = fields.Array("tools");
  if (tools == nullptr) return;
  for (size_t i = 0; i < tools->size() && !fields.failed(); ++i) {
    const json& tool = (*tools)[i];
    const std::string name = fmt::format("tools[{}]", i);
    if (!tool.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(tool)));
      return;
    }
    FieldReader tool_fields = fields.Nested(tool, name + ".");
    std::optional<std::string> type = tool_fields.String("type");
    if (type && *type != "custom") {
      tool_fields.Fail("type", fmt::format("'{}' is a server tool: only custom tools (name, input_schema) are "
                                           "supported",
                                           *type));
      return;
    }
    std::optional<std::string> tool_name = RequiredString(tool_fields, "name");
    if (!tool_name) return;
    niels::v1::Tool* out = plan->create.mutable_tools()->add_tools();
    out->set_name(*tool_name);
    out->set_description(tool_fields.String("description").value_or(""));
    const json* schema = tool_fields.Object("input_schema");
    if (schema == nullptr) {
      if (!tool_fields.failed()) tool_fields.Fail("input_schema", "is required");
      return;
    }
    out->set_parameters(Dump(*schema));
  }
}

void ReadAnthropicToolChoice(FieldReader& fields, MessagesPlan* plan) {
  const json* choice = fields.Object("tool_choice");
  if (choice == nullptr) return;
  FieldReader choice_fields = fields.Nested(*choice, "tool_choice.");
  std::optional<std::string> type = RequiredString(choice_fields, "type");
  (void)choice_fields.Bool("disable_parallel_tool_use");  // type-checked; nielsd's calls are the model's
  if (!type || choice_fields.failed()) return;
  niels::v1::ToolChoice* out = plan->chat.mutable_tool_choice();
  if (*type == "auto") {
    out->set_mode(niels::v1::ToolChoice::AUTO);
  } else if (*type == "any") {
    out->set_mode(niels::v1::ToolChoice::REQUIRED);
  } else if (*type == "none") {
    out->set_mode(niels::v1::ToolChoice::NONE);
  } else if (*type == "tool") {
    std::optional<std::string> name = RequiredString(choice_fields, "name");
    if (!name) return;
    out->set_mode(niels::v1::ToolChoice::NAMED);
    out->set_name(*name);
  } else {
    choice_fields.Fail("type", fmt::format("'{}' is not one of auto, any, tool, none", *type));
  }
}

void ReadStopSequences(FieldReader& fields, MessagesPlan* plan) {
  const json* stops = fields.Array("stop_sequences");
  if (stops == nullptr) return;
  for (size_t i = 0; i < stops->size(); ++i) {
    if (!(*stops)[i].is_string()) {
      fields.Fail(fmt::format("stop_sequences[{}]", i), fmt::format("must be a string, not {}", JsonTypeName((*stops)[i])));
      return;
    }
    plan->chat.add_stop_strings((*stops)[i].get<std::string>());
  }
}

void ReadAnthropicSampling(FieldReader& fields, niels::v1::Sampling* sampling) {
  // Anthropic's defaults: temperature 1, no top-p, no top-k.
  sampling->set_temperature(static_cast<float>(fields.Number("temperature", 0.0, 1.0).value_or(1.0)));
  sampling->set_top_k(static_cast<int32_t>(fields.Integer("top_k", 0, INT32_MAX).value_or(0)));
  if (std::optional<double> top_p = fields.Number("top_p", 0.0, 1.0)) {
    // top_p 0 keeps only the most likely token; nielsd's 0 is "off".
    sampling->set_top_p(*top_p <= 0.0 ? 1e-9f : static_cast<float>(*top_p));
  }
}

void ReadThinking(FieldReader& fields, MessagesPlan* plan) {
  const json* thinking = fields.Object("thinking");
  if (thinking == nullptr) return;
  FieldReader thinking_fields = fields.Nested(*thinking, "thinking.");
  std::optional<std::string> type = RequiredString(thinking_fields, "type");
  (void)thinking_fields.Integer("budget_tokens", 0, INT32_MAX);  // type-checked; not a bound here
  if (!type || thinking_fields.failed()) return;
  if (*type == "enabled" || *type == "adaptive") {
    plan->chat.set_enable_thinking(true);
  } else if (*type == "disabled") {
    plan->chat.set_enable_thinking(false);
  } else {
    thinking_fields.Fail("type", fmt::format("'{}' is not one of enabled, adaptive, disabled", *type));
  }
}

// ------------------------------------------------------------------ answers

const char* AnthropicStopReason(niels::v1::StopReason reason) {
  switch (reason) {
    case niels::v1::MAX_TOKENS:
    case niels::v1::CONTEXT_FULL:
    case niels::v1::CONSTRAINT_INCOMPLETE:
      return "max_tokens";
    case niels::v1::STOP_STRING:
      return "stop_sequence";
    case niels::v1::TOOL_CALLS:
      return "tool_use";
    default:
      return "end_turn";
  }
}

json StopSequence(const niels::v1::ChatResponse& chat) {
  return chat.stop_reason() == niels::v1::STOP_STRING ? json(chat.stop_string()) : json(nullptr);
}

// Anthropic's usage: input_tokens are the prompt tokens not read from the cache (the three input
// counts add up to the prompt).
json MessageUsage(const niels::v1::GenerationStats& stats) {
  return {{"input_tokens", stats.prompt_tokens() - stats.reused_tokens()},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", stats.reused_tokens()},
          {"output_tokens", stats.generated_tokens()}};
}

// A call's arguments as a JSON value (nielsd's calls have object arguments; {} should one not parse).
json ToolInput(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : json::object();
}

std::string MessageDelta(const niels::v1::ChatResponse& chat) {
  json delta = {{"type", "message_delta"},
                {"delta", {{"stop_reason", AnthropicStopReason(chat.stop_reason())}, {"stop_sequence", StopSequence(chat)}}},
                {"usage", MessageUsage(chat.stats())}};
  return Dump(delta);
}

json MessageShell(const std::string& id, const std::string& model) {
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", json::array()},
          {"stop_reason", nullptr},
          {"stop_sequence", nullptr}};
}

std::string MessageAnswer(const std::string& id, const std::string& model, const niels::v1::ChatResponse& chat) {
  json message = MessageShell(id, model);
  json& content = message["content"];
  if (!chat.reasoning().empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", chat.reasoning()}, {"signature", ""}});
  }
  // An empty reply is a text block only when nothing else is there (a message has a block).
  if (!chat.reply().empty() || (chat.tool_calls_size() == 0 && chat.reasoning().empty())) {
    content.push_back({{"type", "text"}, {"text", chat.reply()}});
  }
  for (const niels::v1::ToolCall& call : chat.tool_calls()) {
    content.push_back({{"type", "tool_use"}, {"id", call.id()}, {"name", call.name()}, {"input", ToolInput(call.arguments())}});
  }
  message["stop_reason"] = AnthropicStopReason(chat.stop_reason());
  message["stop_sequence"] = StopSequence(chat);
  message["usage"] = MessageUsage(chat.stats());
  return Dump(message);
}

// The JSON of the stream's blocks and events.
json ThinkingBlock() { return {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}; }
json TextBlock() { return {{"type", "text"}, {"text", ""}}; }
json ToolUseBlock(const niels::v1::ToolCallDelta& call) {
  return {{"type", "tool_use"}, {"id", call.id()}, {"name", call.name()}, {"input", json::object()}};
}
json TypedDelta(const char* type, const char* field, const std::string& value) {
  return {{"type", type}, {field, value}};
}
// {"type": type, "index": index, field: value} (no field when `field` is empty).
std::string BlockEvent(const char* type, int index, const char* field, json value) {
  json event = {{"type", type}, {"index", index}};
  if (*field != '\0') event[field] = std::move(value);
  return Dump(event);
}

std::string MessageStart(const std::string& id, const std::string& model) {
  // The input counts are known at the end only: message_start carries zeros, message_delta the
  // request's usage.
  json message = MessageShell(id, model);
  message["usage"] = {{"input_tokens", 0}, {"output_tokens", 0}};
  return Dump({{"type", "message_start"}, {"message", std::move(message)}});
}

boost::asio::awaitable<void> RespondAnthropicError(Exchange& exchange, ApiError error) {
  co_await exchange.RespondError(WithShape(std::move(error), ErrorShape::kAnthropic));
}

}  // namespace

// One named event of a stream.
struct NamedEvent {
  const char* name;
  std::string data;
};

// The content blocks of a stream (at namespace scope: HandleMessages' coroutine frame holds one):
// the events each token event makes, opening a block when the kind of what arrives changes and
// closing the open one before. Pure (the handler sends the events).
class AnthropicBlockStream {
 public:
  std::vector<NamedEvent> OnEvent(const niels::v1::TokenEvent& event) {
    std::vector<NamedEvent> out;
    if (!event.reasoning().empty()) {
      Open(Kind::kThinking, ThinkingBlock(), false, &out);
      Delta(TypedDelta("thinking_delta", "thinking", event.reasoning()), &out);
    }
    if (!event.text().empty()) {
      Open(Kind::kText, TextBlock(), false, &out);
      Delta(TypedDelta("text_delta", "text", event.text()), &out);
    }
    if (event.has_tool_call()) {
      const niels::v1::ToolCallDelta& call = event.tool_call();
      if (kind_ != Kind::kToolUse || call.index() != tool_index_) {
        tool_index_ = call.index();
        Open(Kind::kToolUse, ToolUseBlock(call), /*always=*/true, &out);
      }
      if (!call.arguments().empty()) Delta(TypedDelta("input_json_delta", "partial_json", call.arguments()), &out);
    }
    return out;
  }

  // Closes the open block; a reply that made none gets one empty text block, as the answer does
  // (the blocks are the answer's: an empty reply beside reasoning or calls has no text block).
  std::vector<NamedEvent> Finish(const niels::v1::ChatResponse& chat) {
    std::vector<NamedEvent> out;
    if (blocks_ == 0 && chat.tool_calls_size() == 0) Open(Kind::kText, TextBlock(), false, &out);
    Close(&out);
    return out;
  }

 private:
  enum class Kind { kNone, kThinking, kText, kToolUse };

  void Open(Kind kind, json block, bool always, std::vector<NamedEvent>* out) {
    if (kind_ == kind && !always) return;
    Close(out);
    kind_ = kind;
    index_ = blocks_++;
    out->push_back({"content_block_start", BlockEvent("content_block_start", index_, "content_block", std::move(block))});
  }

  void Delta(json delta, std::vector<NamedEvent>* out) {
    out->push_back({"content_block_delta", BlockEvent("content_block_delta", index_, "delta", std::move(delta))});
  }

  void Close(std::vector<NamedEvent>* out) {
    if (kind_ == Kind::kNone) return;
    kind_ = Kind::kNone;
    out->push_back({"content_block_stop", BlockEvent("content_block_stop", index_, "", nullptr)});
  }

  Kind kind_ = Kind::kNone;
  int index_ = 0;        // of the open block
  int blocks_ = 0;       // opened so far
  int tool_index_ = -1;  // the open tool_use block's call index
};

// Sends the events in order; false once the client is gone.
boost::asio::awaitable<bool> SendAll(Exchange& exchange, const std::vector<NamedEvent>& events) {
  for (const NamedEvent& event : events) {
    if (!co_await exchange.SendNamedEvent(event.name, event.data)) co_return false;
  }
  co_return true;
}

std::optional<ApiError> MapMessages(const json& body, const ModelView& model, MessagesPlan* plan,
                                    std::optional<std::string_view> session_header) {
  std::optional<ApiError> error;
  FieldReader fields(body, "", &error);
  if (fields.Get("model") == nullptr) fields.Fail("model", "is required");
  ReadModel(fields, model);
  plan->session = ReadBoundSession(fields, session_header);
  std::optional<int64_t> max_tokens = fields.Integer("max_tokens", 1, INT32_MAX);
  if (!max_tokens && !fields.failed()) fields.Fail("max_tokens", "is required");
  ReadSystem(fields, plan);
  ReadAnthropicMessages(fields, plan);
  ReadAnthropicTools(fields, plan);
  ReadAnthropicToolChoice(fields, plan);
  ReadStopSequences(fields, plan);
  ReadAnthropicSampling(fields, plan->chat.mutable_sampling());
  ReadThinking(fields, plan);
  plan->stream = fields.Bool("stream").value_or(false);
  plan->chat.set_max_new_tokens(static_cast<int32_t>(max_tokens.value_or(1)));
  plan->chat.set_stream(plan->stream);
  if (error) error->shape = ErrorShape::kAnthropic;
  return error;
}

boost::asio::awaitable<void> HandleMessages(Exchange& exchange, std::string_view body,
                                            std::optional<std::string_view> session_header) {
  ModelView model;
  if (std::optional<ApiError> error = co_await exchange.Model(&model)) {
    co_await RespondAnthropicError(exchange, *error);
    co_return;
  }
  json request;
  MessagesPlan plan;
  std::optional<ApiError> error = ParseRequestBody(body, &request);
  if (!error) error = MapMessages(request, model, &plan, session_header);
  if (!error && plan.session) {
    niels::v1::GetSessionResponse bound;
    error = co_await GetBoundSession(exchange, *plan.session, &bound);
    if (!error) error = PlanOnSession(bound, plan.create, "system", &plan.chat);
  }
  if (error) {
    co_await RespondAnthropicError(exchange, *error);
    co_return;
  }
  // On a bound session no ephemeral one: Delete is then a no-op.
  EphemeralSession session(exchange);
  if (!plan.session) {
    if (std::optional<ApiError> created = co_await session.Create(plan.create)) {
      co_await RespondAnthropicError(exchange, *created);
      co_return;
    }
  }
  plan.chat.set_session_id(plan.session ? *plan.session : session.id());
  const std::string id = NewResponseId("msg");
  niels::v1::Request chat_request;
  *chat_request.mutable_chat() = std::move(plan.chat);

  niels::v1::Response response;
  if (!plan.stream) {
    response = co_await exchange.Call(std::move(chat_request));
    co_await session.Delete();
    if (response.has_error()) {
      co_await RespondAnthropicError(exchange, FromStatus(common::FromProto(response.error())));
    } else {
      co_await exchange.Respond(200, MessageAnswer(id, model.id, response.chat()));
    }
    co_return;
  }
  const std::string message_start = MessageStart(id, model.id);
  bool open = co_await exchange.BeginEvents();
  if (open) open = co_await exchange.SendNamedEvent("message_start", message_start);
  if (open) open = co_await exchange.SendNamedEvent("ping", R"({"type":"ping"})");
  AnthropicBlockStream blocks;
  if (open) {
    Exchange::EventHandler on_event = [&](const niels::v1::TokenEvent& event) -> boost::asio::awaitable<bool> {
      const std::vector<NamedEvent> events = blocks.OnEvent(event);
      co_return co_await SendAll(exchange, events);
    };
    response = co_await exchange.Call(std::move(chat_request), std::move(on_event));
  }
  co_await session.Delete();
  if (!open) co_return;
  if (response.has_error()) {
    const std::string error_body =
        ErrorBody(WithShape(FromStatus(common::FromProto(response.error())), ErrorShape::kAnthropic));
    co_await exchange.SendNamedEvent("error", error_body);
  } else {
    const niels::v1::ChatResponse& chat = response.chat();
    const std::string message_delta = MessageDelta(chat);
    const std::vector<NamedEvent> last_blocks = blocks.Finish(chat);
    if (co_await SendAll(exchange, last_blocks)) {
      if (co_await exchange.SendNamedEvent("message_delta", message_delta)) {
        co_await exchange.SendNamedEvent("message_stop", R"({"type":"message_stop"})");
      }
    }
  }
  co_await exchange.EndEvents();
}

}  // namespace niels::daemon::http
