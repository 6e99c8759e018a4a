// Chat: one user/assistant turn on a session (the engine's StartChatTurn), its reply streamed as
// text (answer and reasoning) when asked, and the ChatResponse.
#include <algorithm>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/budgets.h"
#include "common/defaults.h"
#include "daemon/engine/chat_turn.h"
#include "daemon/handlers/chat_messages.h"
#include "daemon/handlers/constraint.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"
#include "daemon/tool_grammar/tool_call_grammar.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

StatusOr<engine::ChatTurnArgs> ChatArgs(const engine::EngineState& state, const v1::ChatRequest& request,
                                        const Prepared& prepared) {
  if (request.user_text().size() > kMaxUserTextBytes) {
    return common::Refuse(common::BudgetId::kUserTextBytes,
                          fmt::format("user_text is {} bytes; the limit is {} bytes", request.user_text().size(),
                                      kMaxUserTextBytes));
  }
  if (state.chat_format() == nullptr) return state.chat_format_status;
  engine::ChatTurnArgs args;
  args.session_id = request.session_id();
  args.user_text = request.user_text();
  if (!request.user_text().empty() && request.messages_size() > 0) {
    return Status::InvalidArgument("user_text and messages: give the new messages one way, not both");
  }
  if (request.has_keep_messages()) {
    if (request.keep_messages() < 0) {
      return Status::InvalidArgument(fmt::format("keep_messages = {} is negative", request.keep_messages()));
    }
    args.keep_messages = static_cast<size_t>(request.keep_messages());
  }
  if (request.user_text().empty() && request.messages_size() == 0 && !request.has_keep_messages()) {
    return Status::InvalidArgument(
        "user_text is empty: give the user's text, messages, or keep_messages to reply to the kept conversation");
  }
  StatusOr<std::vector<text::ChatMessage>> messages = MessagesFromProto(request.messages());
  if (!messages.ok()) return messages.status();
  args.messages = std::move(messages).value();
  args.append_only = request.append_only();
  if (prepared.tools) args.tools = *prepared.tools;
  args.tool_choice = ToolChoiceFromProto(request.tool_choice());
  args.max_new_tokens = request.has_max_new_tokens() ? request.max_new_tokens() : common::kDefaultMaxNewTokens;
  if (args.max_new_tokens < 1 || args.max_new_tokens > kMaxNewTokensLimit) {
    return Status::InvalidArgument(
        fmt::format("max_new_tokens = {} must be in [1, {}]", args.max_new_tokens, kMaxNewTokensLimit));
  }
  args.use_kv_cache = !request.has_use_kv_cache() || request.use_kv_cache();
  NIELS_RETURN_IF_ERROR(
      CheckStepAlternatives(request.top_logprobs(), request.sampled_top_logprobs(), args.max_new_tokens));
  args.want_logprobs = request.want_logprobs();
  args.top_logprobs = request.top_logprobs();
  args.sampled_top_logprobs = request.sampled_top_logprobs();
  if (request.has_enable_thinking()) args.options.enable_thinking = request.enable_thinking();
  StatusOr<sampling::SamplingParams> sampling =
      SamplingFromProto(request.sampling(), state.config().vocab_size, state.chat_format()->banned_ids());
  if (!sampling.ok()) return sampling.status();
  args.sampling = std::move(sampling).value();
  StatusOr<std::vector<std::string>> stops = StopStringsFromProto(request.stop_strings());
  if (!stops.ok()) return stops.status();
  args.stop_strings = std::move(stops).value();
  if (!args.stop_strings.empty() && prepared.constraint != nullptr) {
    return Status::InvalidArgument("stop_strings cannot be combined with a constraint: a constrained reply ends where its grammar does");
  }
  if (prepared.constraint != nullptr) {
    NIELS_RETURN_IF_ERROR(CheckConstraintUsable(state, args.sampling, state.chat_format()->stop_ids()));
    args.constraint = prepared.constraint;
  }
  return args;
}

v1::Response ChatResult(const engine::TurnOutcome& outcome, const engine::ChatReply& reply,
                        std::vector<v1::StepInfo>& steps) {
  const engine::GenerateResult& result = outcome.generation;
  v1::Response response;
  v1::ChatResponse& chat = *response.mutable_chat();
  chat.set_reply(reply.answer);
  chat.set_reasoning(reply.reasoning);
  chat.mutable_reply_ids()->Add(reply.ids.begin(), reply.ids.end());
  chat.set_stop_reason(reply.tool_calls.empty() ? StopReasonToProto(result.stop_reason) : v1::TOOL_CALLS);
  for (const text::ToolCall& call : reply.tool_calls) {
    v1::ToolCall& out = *chat.add_tool_calls();
    out.set_id(call.id);
    out.set_name(call.name);
    out.set_arguments(call.arguments);
  }
  // Token-native sessions keep turns (a user message and its reply each), template sessions messages.
  const sessions::Session& session = outcome.session;
  chat.set_messages(static_cast<int32_t>(session.messages().size() + 2 * session.turns().size()));
  chat.set_stop_string(reply.stop_string);
  chat.set_truncated_turns(outcome.truncated_turns);
  chat.set_session_length(outcome.session.length());
  *chat.mutable_stats() = StatsToProto(result, outcome.queue_ms);
  // One step per reply id: not the stop id's, nor those rolled back with a stop string.
  if (steps.size() > reply.ids.size()) steps.resize(reply.ids.size());
  for (v1::StepInfo& step : steps) *chat.add_steps() = std::move(step);
  return response;
}

}  // namespace

bool ChatCompiles(const v1::ChatRequest& request) {
  return ConstraintCompilesText(request.has_constraint(), request.constraint()) ||
         (request.has_tools() && request.tools().tools_size() > 0);
}

StatusOr<Prepared> PrepareChat(const v1::ChatRequest& request, const PrepareContext& context,
                               const CompileCancelled& cancelled) {
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> constraint =
      CompileConstraint(request.has_constraint(), request.constraint(), cancelled);
  if (!constraint.ok()) return constraint.status();
  Prepared prepared{std::move(constraint).value()};
  // A model that may reason: the constraint holds from the first byte after its reasoning block.
  if (prepared.constraint != nullptr && context.reasoning) {
    grammar::GrammarLimits limits = ConstraintGrammarLimits();
    limits.cancelled = cancelled;
    StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> after_reasoning =
        tool_grammar::CompileAfterOptionalReasoning(
            *prepared.constraint, tool_grammar::ReasoningTags{context.reasoning->open, context.reasoning->close}, limits);
    if (!after_reasoning.ok()) return Status(after_reasoning.status().code(), "constraint: " + after_reasoning.status().message());
    prepared.constraint = std::move(after_reasoning).value();
  }
  if (request.has_tools()) {
    StatusOr<std::shared_ptr<const std::vector<text::ToolDefinition>>> tools =
        ToolsFromProto(request.tools(), "tools", cancelled);
    if (!tools.ok()) return tools.status();
    prepared.tools = std::move(tools).value();
    NIELS_RETURN_IF_ERROR(CompileToolGrammars(context, cancelled, prepared));
  }
  return prepared;
}

namespace {

// Chat with append_only: the messages join the conversation, nothing is generated.
v1::Response AppendedResult(const sessions::Session& session) {
  v1::Response response;
  v1::ChatResponse& chat = *response.mutable_chat();
  chat.set_session_length(session.length());
  chat.set_messages(static_cast<int32_t>(session.messages().size()));
  return response;
}

}  // namespace

engine::TurnResult StartChat(engine::EngineState& state, const engine::Work& work, server::Job& job,
                             const v1::ChatRequest& request, const Prepared& prepared) {
  if (prepared.tools && *prepared.tools != nullptr) {
    const Status kept =
        state.tool_grammars.Remember(*prepared.tools, prepared.tool_grammars, prepared.tool_grammars_status, work.owner);
    if (!kept.ok()) return kept;
  }
  StatusOr<engine::ChatTurnArgs> args = ChatArgs(state, request, prepared);
  if (!args.ok()) return args.status();
  if (args->append_only) {
    StatusOr<const sessions::Session*> appended = engine::AppendChatMessages(state, work, *args);
    if (!appended.ok()) return appended.status();
    job.Finish(AppendedResult(**appended));
    return engine::TurnStart{};
  }
  engine::ChatCallbacks callbacks;
  // Steps of the reply's ids (not of the end-of-turn id that ends it), collected for the final
  // response and sent with each token's first event when streaming.
  const bool want_steps = args->want_logprobs || args->top_logprobs > 0 || args->sampled_top_logprobs > 0;
  auto steps = std::make_shared<std::vector<v1::StepInfo>>();
  const auto step_of = [steps, &tokenizer = state.tokenizer(),
                        stop_ids = state.chat_format()->stop_ids()](const engine::StepEvent& event) -> const v1::StepInfo* {
    if (std::find(stop_ids.begin(), stop_ids.end(), event.id) != stop_ids.end()) return nullptr;
    steps->push_back(StepToProto(event, tokenizer, /*with_text_bytes=*/true));
    return &steps->back();
  };
  if (want_steps && !request.stream()) {
    callbacks.on_token = [step_of](const engine::StepEvent& event, const text::ReplyDelta&,
                                   std::span<const engine::ToolCallPiece>) { step_of(event); };
  }
  if (request.stream()) {
    callbacks.on_token = [&job, want_steps, step_of](const engine::StepEvent& event, const text::ReplyDelta& delta,
                                                     std::span<const engine::ToolCallPiece> calls) {
      const v1::StepInfo* step = want_steps ? step_of(event) : nullptr;
      // A token that completes several calls: one event per further call, with the same id and
      // index and no text.
      for (size_t i = 0; i == 0 || i < calls.size(); ++i) {
        v1::TokenEvent token;
        token.set_id(event.id);
        token.set_index(event.index);
        if (i == 0) {
          token.set_text(delta.answer);
          token.set_reasoning(delta.reasoning);
          if (step != nullptr) *token.mutable_step() = *step;
        }
        if (i < calls.size()) {
          v1::ToolCallDelta& call = *token.mutable_tool_call();
          call.set_index(static_cast<int32_t>(calls[i].index));
          call.set_id(calls[i].id);
          call.set_name(calls[i].name);
          call.set_arguments(calls[i].arguments);
        }
        job.SendEvent(std::move(token));
      }
    };
  }
  callbacks.on_commit = [&job, steps](const engine::TurnOutcome& outcome, const engine::ChatReply& reply) {
    job.Finish(ChatResult(outcome, reply, *steps));
  };
  return engine::StartChatTurn(state, work, *args, std::move(callbacks));
}

}  // namespace niels::daemon::handlers
