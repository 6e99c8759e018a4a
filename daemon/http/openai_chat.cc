#include "daemon/http/openai_chat.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>
#include <utility>

#include <fmt/format.h>

#include "common/defaults.h"
#include "common/wire_status.h"
#include "daemon/http/bound_session.h"
#include "daemon/http/ephemeral_session.h"

namespace niels::daemon::http {
namespace {

using nlohmann::json;

// A message's content: a string, or an array of text parts joined.
std::optional<std::string> ReadContent(FieldReader& fields, bool required) {
  const json* content = fields.Get("content");
  if (content == nullptr) {
    if (required) fields.Fail("content", "is required");
    return std::nullopt;
  }
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    fields.Fail("content", fmt::format("must be a string or an array of content parts, not {}", JsonTypeName(*content)));
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const json& part = (*content)[i];
    const std::string name = fmt::format("content[{}]", i);
    if (!part.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(part)));
      return std::nullopt;
    }
    FieldReader part_fields = fields.Nested(part, fields.Name(name) + ".");
    std::optional<std::string> type = part_fields.String("type");
    if (type != "text") {
      part_fields.Fail("type", "only \"text\" content parts are supported");
      return std::nullopt;
    }
    std::optional<std::string> part_text = part_fields.String("text");
    if (!part_text) {
      part_fields.Fail("text", "is required");
      return std::nullopt;
    }
    text += *part_text;
  }
  return text;
}

void ReadToolCalls(FieldReader& fields, niels::v1::ChatMessage* message) {
  const json* calls = fields.Array("tool_calls");
  if (calls == nullptr) return;
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& call = (*calls)[i];
    const std::string name = fmt::format("tool_calls[{}]", i);
    if (!call.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(call)));
      return;
    }
    FieldReader call_fields = fields.Nested(call, fields.Name(name) + ".");
    niels::v1::ToolCall* out = message->add_tool_calls();
    out->set_id(call_fields.String("id").value_or(""));
    const json* function = call_fields.Object("function");
    if (function == nullptr) {
      call_fields.Fail("function", "is required");
      return;
    }
    FieldReader function_fields = call_fields.Nested(*function, call_fields.Name("function."));
    std::optional<std::string> function_name = function_fields.String("name");
    if (!function_name) function_fields.Fail("name", "is required");
    out->set_name(function_name.value_or(""));
    out->set_arguments(function_fields.String("arguments").value_or("{}"));
  }
}

void ReadMessages(FieldReader& fields, ChatPlan* plan) {
  const json* messages = fields.NonEmptyArray("messages");
  if (messages == nullptr) return;
  std::optional<std::string> system_prompt;
  bool conversation_started = false;
  std::vector<niels::v1::ChatMessage> conversation;
  for (size_t i = 0; i < messages->size() && !fields.failed(); ++i) {
    const json& entry = (*messages)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!entry.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(entry)));
      return;
    }
    FieldReader message_fields = fields.Nested(entry, name + ".");
    std::optional<std::string> role = message_fields.String("role");
    if (!role) {
      message_fields.Fail("role", "is required");
      return;
    }
    const bool system = *role == "system" || *role == "developer";
    if (!system && *role != "user" && *role != "assistant" && *role != "tool") {
      message_fields.Fail("role", fmt::format("'{}' is not one of system, developer, user, assistant, tool", *role));
      return;
    }
    std::optional<std::string> content = ReadContent(message_fields, /*required=*/*role != "assistant");
    if (system && !conversation_started) {
      system_prompt = system_prompt ? *system_prompt + "\n\n" + content.value_or("") : content.value_or("");
      continue;
    }
    conversation_started = true;
    niels::v1::ChatMessage message;
    message.set_role(system ? "system" : *role);
    message.set_content(content.value_or(""));
    if (*role == "assistant") {
      message.set_reasoning(message_fields.String("reasoning_content").value_or(""));
      ReadToolCalls(message_fields, &message);
    }
    if (*role == "tool") {
      message.set_tool_call_id(message_fields.String("tool_call_id").value_or(""));
      message.set_name(message_fields.String("name").value_or(""));
    }
    conversation.push_back(std::move(message));
  }
  if (fields.failed()) return;
  if (conversation.empty()) {
    fields.Fail("messages", "has no user message (only system messages)");
    return;
  }
  if (system_prompt) plan->create.set_system_prompt(*system_prompt);
  // One non-empty user message is a plain turn; an empty one goes as messages (an empty user_text
  // is no turn at all).
  if (conversation.size() == 1 && conversation[0].role() == "user" && !conversation[0].content().empty()) {
    plan->chat.set_user_text(conversation[0].content());
    return;
  }
  for (niels::v1::ChatMessage& message : conversation) *plan->chat.add_messages() = std::move(message);
}

void ReadTools(FieldReader& fields, ChatPlan* plan) {
  const json* tools = fields.Array("tools");
  if (tools == nullptr) return;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string name = fmt::format("tools[{}]", i);
    if (!tool.is_object()) {
      fields.Fail(name, fmt::format("must be an object, not {}", JsonTypeName(tool)));
      return;
    }
    FieldReader tool_fields = fields.Nested(tool, name + ".");
    std::optional<std::string> type = tool_fields.String("type");
    if (type && *type != "function") {
      tool_fields.Fail("type", "only \"function\" tools are supported");
      return;
    }
    const json* function = tool_fields.Object("function");
    if (function == nullptr) {
      tool_fields.Fail("function", "is required");
      return;
    }
    FieldReader function_fields = tool_fields.Nested(*function, tool_fields.Name("function."));
    niels::v1::Tool* out = plan->create.mutable_tools()->add_tools();
    std::optional<std::string> tool_name = function_fields.String("name");
    if (!tool_name) function_fields.Fail("name", "is required");
    out->set_name(tool_name.value_or(""));
    out->set_description(function_fields.String("description").value_or(""));
    if (const json* parameters = function_fields.Object("parameters")) out->set_parameters(Dump(*parameters));
  }
}

void ReadToolChoice(FieldReader& fields, ChatPlan* plan) {
  const json* choice = fields.Get("tool_choice");
  if (choice == nullptr) return;
  niels::v1::ToolChoice* out = plan->chat.mutable_tool_choice();
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "auto") {
      out->set_mode(niels::v1::ToolChoice::AUTO);
    } else if (mode == "none") {
      out->set_mode(niels::v1::ToolChoice::NONE);
    } else if (mode == "required") {
      out->set_mode(niels::v1::ToolChoice::REQUIRED);
    } else {
      fields.Fail("tool_choice", fmt::format("'{}' is not one of auto, none, required", mode));
    }
    return;
  }
  if (!choice->is_object()) {
    fields.Fail("tool_choice", fmt::format("must be a string or an object, not {}", JsonTypeName(*choice)));
    return;
  }
  FieldReader choice_fields = fields.Nested(*choice, "tool_choice.");
  const json* function = choice_fields.Object("function");
  if (function == nullptr) {
    choice_fields.Fail("function", "is required");
    return;
  }
  FieldReader function_fields = choice_fields.Nested(*function, "tool_choice.function.");
  std::optional<std::string> name = function_fields.String("name");
  if (!name) {
    function_fields.Fail("name", "is required");
    return;
  }
  out->set_mode(niels::v1::ToolChoice::NAMED);
  out->set_name(*name);
}

void ReadResponseFormat(FieldReader& fields, ChatPlan* plan) {
  const json* format = fields.Object("response_format");
  if (format == nullptr) return;
  FieldReader format_fields = fields.Nested(*format, "response_format.");
  std::optional<std::string> type = format_fields.String("type");
  if (!type) {
    format_fields.Fail("type", "is required");
  } else if (*type == "json_object") {
    plan->chat.mutable_constraint()->mutable_any_json();
  } else if (*type == "json_schema") {
    const json* schema_spec = format_fields.Object("json_schema");
    if (schema_spec == nullptr) {
      format_fields.Fail("json_schema", "is required with type json_schema");
      return;
    }
    FieldReader spec_fields = format_fields.Nested(*schema_spec, "response_format.json_schema.");
    const json* schema = spec_fields.Object("schema");
    if (schema == nullptr) {
      plan->chat.mutable_constraint()->mutable_any_json();
    } else {
      plan->chat.mutable_constraint()->set_json_schema(Dump(*schema));
    }
  } else if (*type != "text") {
    format_fields.Fail("type", fmt::format("'{}' is not one of text, json_object, json_schema", *type));
  }
}

}  // namespace

std::optional<ApiError> MapChatCompletion(const json& body, const ModelView& model, ChatPlan* plan,
                                          std::optional<std::string_view> session_header) {
  std::optional<ApiError> error;
  FieldReader fields(body, "", &error);
  ReadModel(fields, model);
  plan->session = ReadBoundSession(fields, session_header);
  ReadMessages(fields, plan);
  ReadTools(fields, plan);
  ReadToolChoice(fields, plan);
  ReadResponseFormat(fields, plan);
  ReadSampling(fields, plan->chat.mutable_sampling());
  ReadLogitBias(fields, model, plan->chat.mutable_sampling());
  ReadStop(fields, plan->chat.mutable_stop_strings());
  plan->stream = ReadStream(fields);
  std::optional<int64_t> max_tokens = fields.Integer("max_completion_tokens", 1, INT32_MAX);
  if (!max_tokens) max_tokens = fields.Integer("max_tokens", 1, INT32_MAX);
  // Default: up to the end of the context (the engine stops there: finish_reason "length"), within
  // the most a request may ask for (the handlers' max_new_tokens bound, 65536).
  constexpr int64_t kMostNewTokens = int64_t{1} << 16;
  plan->chat.set_max_new_tokens(
      static_cast<int32_t>(max_tokens.value_or(std::clamp<int64_t>(model.context, 1, kMostNewTokens))));
  plan->n = static_cast<int32_t>(fields.Integer("n", 1, kMaxChoices).value_or(1));
  if (plan->session && plan->n > 1) {
    fields.Fail("n", fmt::format("must be 1 on a session ({}): a session holds one conversation (fork it with "
                                 "ForkSession for more)", kSessionField));
  }
  const bool logprobs = fields.Bool("logprobs").value_or(false);
  constexpr int64_t kMostTopLogprobs = 20;  // the native requests' limit (proto/PROTOCOL.md "Logprobs")
  const std::optional<int64_t> top_logprobs = fields.Integer("top_logprobs", 0, kMostTopLogprobs);
  if (top_logprobs && !logprobs) fields.Fail("top_logprobs", "needs logprobs set to true");
  plan->chat.set_want_logprobs(logprobs);
  plan->chat.set_top_logprobs(static_cast<int32_t>(top_logprobs.value_or(0)));
  if (const json* kwargs = fields.Object("chat_template_kwargs")) {
    FieldReader kwarg_fields = fields.Nested(*kwargs, "chat_template_kwargs.");
    if (std::optional<bool> thinking = kwarg_fields.Bool("enable_thinking")) plan->chat.set_enable_thinking(*thinking);
  }
  plan->chat.set_stream(plan->stream.stream);
  return error;
}

niels::v1::ChatRequest ChoiceChat(const ChatPlan& plan, int32_t index) {
  niels::v1::ChatRequest chat = plan.chat;
  if (plan.n == 1) return chat;
  const uint64_t seed = chat.sampling().has_seed() ? chat.sampling().seed() : common::kDefaultSeed;
  chat.mutable_sampling()->set_seed(seed + static_cast<uint64_t>(index));
  return chat;
}

namespace {

json ToolCallsJson(const google::protobuf::RepeatedPtrField<niels::v1::ToolCall>& calls) {
  json out = json::array();
  for (const niels::v1::ToolCall& call : calls) {
    out.push_back({{"id", call.id()},
                   {"type", "function"},
                   {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
  }
  return out;
}

json Chunk(const std::string& id, int64_t created, const std::string& model, json delta, json finish_reason,
           int32_t index = 0, json logprobs = nullptr) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", nullptr},
          {"choices", json::array({{{"index", index},
                                    {"delta", std::move(delta)},
                                    {"logprobs", std::move(logprobs)},
                                    {"finish_reason", std::move(finish_reason)}}})}};
}

// OpenAI's entry of one token: its text (bytes that are not valid UTF-8 by themselves come out as
// U+FFFD when the JSON is written), its logprob (-9999.0 for -inf, OpenAI's stand-in: JSON has no
// infinity) and its raw bytes.
json TokenLogprob(const std::string& bytes, float logprob) {
  json raw = json::array();
  for (const unsigned char c : bytes) raw.push_back(static_cast<int>(c));
  return {{"token", bytes}, {"logprob", std::isfinite(logprob) ? logprob : -9999.0f}, {"bytes", std::move(raw)}};
}

// The `content` entry of one step, with its alternatives.
json StepLogprobs(const niels::v1::StepInfo& step) {
  json entry = TokenLogprob(step.text_bytes(), step.logprob());
  json top = json::array();
  for (const niels::v1::TokenAlternative& alternative : step.top()) {
    top.push_back(TokenLogprob(alternative.text_bytes(), alternative.logprob()));
  }
  entry["top_logprobs"] = std::move(top);
  return entry;
}

std::string FirstChunk(const std::string& id, int64_t created, const std::string& model, int32_t index) {
  return Dump(Chunk(id, created, model, {{"role", "assistant"}, {"content", ""}}, nullptr, index));
}

// The chunk of one event; nullopt when it adds nothing a client sees.
std::optional<std::string> EventChunk(const std::string& id, int64_t created, const std::string& model,
                                      const niels::v1::TokenEvent& event, int32_t index) {
  json delta = json::object();
  if (!event.text().empty()) delta["content"] = event.text();
  if (!event.reasoning().empty()) delta["reasoning_content"] = event.reasoning();
  if (event.has_tool_call()) {
    const niels::v1::ToolCallDelta& call = event.tool_call();
    json function = {{"arguments", call.arguments()}};
    json entry = {{"index", call.index()}};
    if (!call.id().empty()) {
      entry["id"] = call.id();
      entry["type"] = "function";
    }
    if (!call.name().empty()) function["name"] = call.name();
    entry["function"] = std::move(function);
    delta["tool_calls"] = json::array({std::move(entry)});
  }
  if (event.has_step()) {
    // A token with logprobs is a chunk of its own even when it adds no text yet (partial UTF-8).
    return Dump(Chunk(id, created, model, std::move(delta), nullptr, index,
                      {{"content", json::array({StepLogprobs(event.step())})}, {"refusal", nullptr}}));
  }
  if (delta.empty()) return std::nullopt;
  return Dump(Chunk(id, created, model, std::move(delta), nullptr, index));
}

std::string FinishChunk(const std::string& id, int64_t created, const std::string& model,
                        const niels::v1::ChatResponse& chat, int32_t index) {
  return Dump(Chunk(id, created, model, json::object(), FinishReason(chat.stop_reason()), index));
}

// The usage of all the choices: the prompt once (the first choice's, with its cached tokens), the
// completion tokens of every choice.
json ChoicesUsage(const std::vector<const niels::v1::ChatResponse*>& chats) {
  json usage = Usage(chats.front()->stats());
  int64_t completion = 0;
  for (const niels::v1::ChatResponse* chat : chats) completion += chat->stats().generated_tokens();
  usage["completion_tokens"] = completion;
  usage["total_tokens"] = chats.front()->stats().prompt_tokens() + completion;
  return usage;
}

std::string UsageChunk(const std::string& id, int64_t created, const std::string& model,
                       const std::vector<const niels::v1::ChatResponse*>& chats) {
  json usage_chunk = Chunk(id, created, model, json::object(), nullptr);
  usage_chunk["choices"] = json::array();
  usage_chunk["usage"] = ChoicesUsage(chats);
  return Dump(usage_chunk);
}

json ChoiceJson(const niels::v1::ChatResponse& chat, int32_t index, bool want_logprobs) {
  json message = {{"role", "assistant"}, {"content", chat.reply()}};
  if (!chat.reasoning().empty()) message["reasoning_content"] = chat.reasoning();
  if (chat.tool_calls_size() > 0) {
    message["tool_calls"] = ToolCallsJson(chat.tool_calls());
    if (chat.reply().empty()) message["content"] = nullptr;
  }
  json logprobs = nullptr;
  if (want_logprobs) {
    json content = json::array();
    for (const niels::v1::StepInfo& step : chat.steps()) content.push_back(StepLogprobs(step));
    logprobs = {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", std::move(logprobs)},
          {"finish_reason", FinishReason(chat.stop_reason())}};
}

std::string Answer(const std::string& id, int64_t created, const std::string& model,
                   const std::vector<const niels::v1::ChatResponse*>& chats, bool want_logprobs) {
  json choices = json::array();
  for (size_t i = 0; i < chats.size(); ++i) {
    choices.push_back(ChoiceJson(*chats[i], static_cast<int32_t>(i), want_logprobs));
  }
  json answer = {{"id", id},
                 {"object", "chat.completion"},
                 {"created", created},
                 {"model", model},
                 {"system_fingerprint", nullptr},
                 {"choices", std::move(choices)},
                 {"usage", ChoicesUsage(chats)}};
  return Dump(answer);
}

// The first error among the responses, if any.
const niels::v1::Response* FirstError(const std::vector<niels::v1::Response>& responses) {
  for (const niels::v1::Response& response : responses) {
    if (response.has_error()) return &response;
  }
  return nullptr;
}

std::vector<const niels::v1::ChatResponse*> Chats(const std::vector<niels::v1::Response>& responses) {
  std::vector<const niels::v1::ChatResponse*> chats;
  for (const niels::v1::Response& response : responses) chats.push_back(&response.chat());
  return chats;
}

// Deletes the sessions (not cancelled by a gone client).
boost::asio::awaitable<void> DeleteAll(std::vector<std::unique_ptr<EphemeralSession>>& sessions) {
  for (std::unique_ptr<EphemeralSession>& session : sessions) co_await session->Delete();
}

}  // namespace

boost::asio::awaitable<void> HandleChatCompletion(Exchange& exchange, std::string_view body,
                                                  std::optional<std::string_view> session_header) {
  ModelView model;
  if (std::optional<ApiError> error = co_await exchange.Model(&model)) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  json request;
  ChatPlan plan;
  std::optional<ApiError> error = ParseRequestBody(body, &request);
  if (!error) error = MapChatCompletion(request, model, &plan, session_header);
  if (!error && plan.session) {
    niels::v1::GetSessionResponse bound;
    error = co_await GetBoundSession(exchange, *plan.session, &bound);
    if (!error) error = PlanOnSession(bound, plan.create, "messages[0]", &plan.chat);
  }
  if (error) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  // One ephemeral session per choice, all before any Chat: a caller without room for n sessions
  // gets its quota's refusal and nothing runs.
  // On a bound session: none (the one Chat runs on it and it stays).
  std::vector<std::unique_ptr<EphemeralSession>> sessions;
  for (int32_t i = 0; i < plan.n && !plan.session; ++i) {
    sessions.push_back(std::make_unique<EphemeralSession>(exchange));
    if (std::optional<ApiError> created = co_await sessions.back()->Create(plan.create)) {
      co_await DeleteAll(sessions);
      co_await exchange.RespondError(*created);
      co_return;
    }
  }
  const std::string id = NewResponseId("chatcmpl");
  const int64_t created = UnixNow();
  std::vector<niels::v1::Request> requests;
  for (int32_t i = 0; i < plan.n; ++i) {
    niels::v1::Request chat_request;
    *chat_request.mutable_chat() = ChoiceChat(plan, i);
    chat_request.mutable_chat()->set_session_id(plan.session ? *plan.session : sessions[i]->id());
    // Several choices stream internally even when the answer is one JSON: the first token of the
    // first choice is when the others start (Exchange::CallAll).
    if (plan.n > 1) chat_request.mutable_chat()->set_stream(true);
    requests.push_back(std::move(chat_request));
  }

  std::vector<niels::v1::Response> responses;
  if (!plan.stream.stream) {
    responses = co_await exchange.CallAll(std::move(requests), nullptr);
    co_await DeleteAll(sessions);
    if (const niels::v1::Response* failed = FirstError(responses)) {
      co_await exchange.RespondError(FromStatus(common::FromProto(failed->error())));
    } else {
      co_await exchange.Respond(200, Answer(id, created, model.id, Chats(responses), plan.chat.want_logprobs()));
    }
    co_return;
  }
  bool open = co_await exchange.BeginEvents();
  for (int32_t i = 0; i < plan.n && open; ++i) open = co_await exchange.SendEvent(FirstChunk(id, created, model.id, i));
  if (open) {
    Exchange::IndexedEventHandler on_event = [&](size_t index,
                                                 const niels::v1::TokenEvent& event) -> boost::asio::awaitable<bool> {
      std::optional<std::string> chunk = EventChunk(id, created, model.id, event, static_cast<int32_t>(index));
      if (!chunk) co_return true;
      co_return co_await exchange.SendEvent(*chunk);
    };
    responses = co_await exchange.CallAll(std::move(requests), std::move(on_event));
  }
  co_await DeleteAll(sessions);
  if (!open) co_return;
  if (const niels::v1::Response* failed = FirstError(responses)) {
    co_await exchange.SendEvent(ErrorBody(FromStatus(common::FromProto(failed->error()))));
  } else {
    for (size_t i = 0; i < responses.size(); ++i) {
      co_await exchange.SendEvent(FinishChunk(id, created, model.id, responses[i].chat(), static_cast<int32_t>(i)));
    }
    if (plan.stream.include_usage) co_await exchange.SendEvent(UsageChunk(id, created, model.id, Chats(responses)));
    co_await exchange.SendEvent(std::string("[DONE]"));
  }
  co_await exchange.EndEvents();
}

}  // namespace niels::daemon::http
