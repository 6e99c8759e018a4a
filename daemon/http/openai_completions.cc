#include "daemon/http/openai_completions.h"

#include <utility>

#include <fmt/format.h>

#include "common/wire_status.h"
#include "daemon/http/bound_session.h"
#include "daemon/http/ephemeral_session.h"

namespace niels::daemon::http {
// (Not in the anonymous namespace: the handler coroutine's frame holds one.)
namespace completions_detail {

using nlohmann::json;

// OpenAI's completions logprobs of the tokens so far (text_offset from `offset`).
struct Logprobs {
  json tokens = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
  json text_offset = json::array();

  void Add(const niels::v1::TokenEvent& event, size_t offset, bool with_top) {
    tokens.push_back(event.text());
    token_logprobs.push_back(event.step().logprob());
    text_offset.push_back(offset);
    if (with_top) {
      json top = json::object();
      for (const niels::v1::TokenAlternative& alternative : event.step().top()) {
        top[alternative.piece()] = alternative.logprob();
      }
      top_logprobs.push_back(std::move(top));
    }
  }
  json ToJson(bool with_top) const {
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs},
            {"top_logprobs", with_top ? top_logprobs : json(nullptr)}, {"text_offset", text_offset}};
  }
};

}  // namespace completions_detail

using completions_detail::Logprobs;

namespace {

using nlohmann::json;

// Token ids from a JSON array; false (with the error recorded) when one is not an id.
bool ReadIds(FieldReader& fields, const std::string& name, const json& array,
             google::protobuf::RepeatedField<int32_t>* ids) {
  for (size_t i = 0; i < array.size(); ++i) {
    const json& id = array[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fields.Fail(fmt::format("{}[{}]", name, i), "must be a token id (an integer >= 0)");
      return false;
    }
    ids->Add(static_cast<int32_t>(id.get<int64_t>()));
  }
  return true;
}

void ReadPrompt(FieldReader& fields, CompletionPlan* plan) {
  const json* prompt = fields.Get("prompt");
  if (prompt == nullptr) {
    if (!fields.failed()) fields.Fail("prompt", "is required");
    return;
  }
  if (prompt->is_string()) {
    plan->prompt_text = prompt->get<std::string>();
    return;
  }
  if (!prompt->is_array()) {
    fields.Fail("prompt", fmt::format("must be a string or an array of token ids, not {}", JsonTypeName(*prompt)));
    return;
  }
  if (prompt->empty() || (*prompt)[0].is_number()) {
    ReadIds(fields, "prompt", *prompt, plan->generate.mutable_input_ids());
    return;
  }
  if (prompt->size() != 1) {
    fields.Fail("prompt", "only one prompt per request is supported");
    return;
  }
  const json& only = (*prompt)[0];
  if (only.is_string()) {
    plan->prompt_text = only.get<std::string>();
  } else if (only.is_array()) {
    ReadIds(fields, "prompt[0]", only, plan->generate.mutable_input_ids());
  } else {
    fields.Fail("prompt[0]", fmt::format("must be a string or an array of token ids, not {}", JsonTypeName(only)));
  }
}

json Choice(std::string text, json logprobs, json finish_reason) {
  return {{"index", 0}, {"text", std::move(text)}, {"logprobs", std::move(logprobs)},
          {"finish_reason", std::move(finish_reason)}};
}

json Completion(const std::string& id, int64_t created, const std::string& model, json choice) {
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
          {"system_fingerprint", nullptr}, {"choices", json::array({std::move(choice)})}};
}


}  // namespace

std::optional<ApiError> MapCompletion(const json& body, const ModelView& model, CompletionPlan* plan,
                                      std::optional<std::string_view> session_header) {
  std::optional<ApiError> error;
  FieldReader fields(body, "", &error);
  ReadModel(fields, model);
  plan->session = ReadBoundSession(fields, session_header);
  ReadPrompt(fields, plan);
  ReadSampling(fields, plan->generate.mutable_sampling());
  ReadLogitBias(fields, model, plan->generate.mutable_sampling());
  ReadStop(fields, plan->generate.mutable_stop_strings());
  plan->stream = ReadStream(fields);
  plan->generate.set_max_new_tokens(
      static_cast<int32_t>(fields.Integer("max_tokens", 0, INT32_MAX).value_or(kDefaultCompletionTokens)));
  if (std::optional<int64_t> logprobs = fields.Integer("logprobs", 0, 20)) {
    plan->logprobs = true;
    plan->generate.set_want_logprobs(true);
    plan->generate.set_top_logprobs(static_cast<int32_t>(*logprobs));
  }
  if (std::optional<int64_t> n = fields.Integer("n", 1, INT32_MAX); n && *n != 1) fields.Fail("n", "only n = 1 is supported");
  if (std::optional<int64_t> best = fields.Integer("best_of", 1, INT32_MAX); best && *best != 1) {
    fields.Fail("best_of", "only best_of = 1 is supported");
  }
  if (fields.Bool("echo").value_or(false)) fields.Fail("echo", "echo is not supported");
  if (fields.String("suffix")) fields.Fail("suffix", "suffix is not supported");
  // Always streamed inside: the text is the events' text (stop strings held back), the answer is
  // assembled from them.
  plan->generate.set_stream(true);
  if (!error && !plan->prompt_text && plan->generate.input_ids_size() >= model.context) {
    error = MakeError(400, fmt::format("the prompt is {} tokens; the model's context is {} tokens",
                                            plan->generate.input_ids_size(), model.context), "prompt", "context_length_exceeded");
  }
  return error;
}

namespace {

std::string ContextExceeded(int64_t prompt_tokens, int64_t context) {
  return fmt::format("the prompt is {} tokens; the model's context is {} tokens", prompt_tokens, context);
}

std::string EventChunk(const std::string& id, int64_t created, const std::string& model,
                       const niels::v1::TokenEvent& event, size_t offset, bool logprobs, bool with_top) {
  json chunk_logprobs = nullptr;
  if (logprobs) {
    Logprobs one;
    one.Add(event, offset, with_top);
    chunk_logprobs = one.ToJson(with_top);
  }
  return Dump(Completion(id, created, model, Choice(event.text(), std::move(chunk_logprobs), nullptr)));
}

std::string FinishChunk(const std::string& id, int64_t created, const std::string& model,
                        const niels::v1::GenerateResponse& generate) {
  return Dump(Completion(id, created, model, Choice("", nullptr, FinishReason(generate.stop_reason()))));
}

std::string UsageChunk(const std::string& id, int64_t created, const std::string& model,
                       const niels::v1::GenerateResponse& generate) {
  json usage_chunk = Completion(id, created, model, nullptr);
  usage_chunk["choices"] = json::array();
  usage_chunk["usage"] = Usage(generate.stats());
  return Dump(usage_chunk);
}

std::string Answer(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                   const Logprobs* logprobs, bool with_top, const niels::v1::GenerateResponse& generate) {
  json answer = Completion(id, created, model,
                           Choice(text, logprobs != nullptr ? logprobs->ToJson(with_top) : json(nullptr),
                                  FinishReason(generate.stop_reason())));
  answer["usage"] = Usage(generate.stats());
  return Dump(answer);
}

}  // namespace

boost::asio::awaitable<void> HandleCompletion(Exchange& exchange, std::string_view body,
                                              std::optional<std::string_view> session_header) {
  ModelView model;
  if (std::optional<ApiError> error = co_await exchange.Model(&model)) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  json request;
  CompletionPlan plan;
  std::optional<ApiError> error = ParseRequestBody(body, &request);
  if (!error) error = MapCompletion(request, model, &plan, session_header);
  // On a bound session the prompt follows the session's tokens.
  int64_t held = 0;
  if (!error && plan.session) {
    niels::v1::GetSessionResponse bound;
    error = co_await GetBoundSession(exchange, *plan.session, &bound);
    held = bound.session().length();
  }
  if (error) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  if (plan.prompt_text) {
    niels::v1::Request tokenize;
    tokenize.mutable_tokenize()->set_text(*plan.prompt_text);
    tokenize.mutable_tokenize()->set_add_special(held == 0);
    niels::v1::Response tokens = co_await exchange.Call(std::move(tokenize));
    if (tokens.has_error()) {
      ApiError failed = FromStatus(common::FromProto(tokens.error()));
      failed.param = "prompt";
      co_await exchange.RespondError(failed);
      co_return;
    }
    *plan.generate.mutable_input_ids() = tokens.tokenize().ids();
  }
  if (held + plan.generate.input_ids_size() >= model.context) {
    co_await exchange.RespondError(MakeError(400, ContextExceeded(held + plan.generate.input_ids_size(), model.context),
                                             "prompt", "context_length_exceeded"));
    co_return;
  }
  // On a bound session no ephemeral one: Delete is then a no-op.
  EphemeralSession session(exchange);
  if (!plan.session) {
    if (std::optional<ApiError> created = co_await session.Create(niels::v1::CreateSessionRequest())) {
      co_await exchange.RespondError(*created);
      co_return;
    }
  }
  plan.generate.set_session_id(plan.session ? *plan.session : session.id());
  const std::string id = NewResponseId("cmpl");
  const int64_t created = UnixNow();
  const bool with_top = plan.generate.top_logprobs() > 0;
  niels::v1::Request generate;
  *generate.mutable_generate() = std::move(plan.generate);

  std::string text;
  Logprobs logprobs;
  bool open = true;
  if (plan.stream.stream) open = co_await exchange.BeginEvents();
  niels::v1::Response response;
  if (open) {
    Exchange::EventHandler on_event = [&](const niels::v1::TokenEvent& event) -> boost::asio::awaitable<bool> {
      const size_t offset = text.size();
      text += event.text();
      if (plan.logprobs) logprobs.Add(event, offset, with_top);
      if (!plan.stream.stream || (event.text().empty() && !plan.logprobs)) co_return true;
      co_return co_await exchange.SendEvent(EventChunk(id, created, model.id, event, offset, plan.logprobs, with_top));
    };
    response = co_await exchange.Call(std::move(generate), std::move(on_event));
  }
  co_await session.Delete();
  if (!plan.stream.stream) {
    if (response.has_error()) {
      co_await exchange.RespondError(FromStatus(common::FromProto(response.error())));
    } else {
      co_await exchange.Respond(
          200, Answer(id, created, model.id, text, plan.logprobs ? &logprobs : nullptr, with_top, response.generate()));
    }
    co_return;
  }
  if (!open) co_return;
  if (response.has_error()) {
    co_await exchange.SendEvent(ErrorBody(FromStatus(common::FromProto(response.error()))));
  } else {
    co_await exchange.SendEvent(FinishChunk(id, created, model.id, response.generate()));
    if (plan.stream.include_usage) co_await exchange.SendEvent(UsageChunk(id, created, model.id, response.generate()));
    co_await exchange.SendEvent(std::string("[DONE]"));
  }
  co_await exchange.EndEvents();
}

}  // namespace niels::daemon::http
