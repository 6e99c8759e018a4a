// Chat: one user/assistant turn on a session (the engine's StartChatTurn), its reply streamed as
// text when asked, and the ChatResponse.
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/defaults.h"
#include "daemon/text/chat_template.h"
#include "daemon/engine/chat_turn.h"
#include "daemon/text/text_stream.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

StatusOr<engine::ChatTurnArgs> ChatArgs(const engine::EngineState& state, const v1::ChatRequest& request) {
  if (request.user_text().empty()) return Status::InvalidArgument("user_text is empty");
  engine::ChatTurnArgs args;
  args.session_id = request.session_id();
  args.user_text = request.user_text();
  args.max_new_tokens = request.has_max_new_tokens() ? request.max_new_tokens() : common::kDefaultMaxNewTokens;
  if (args.max_new_tokens < 1 || args.max_new_tokens > kMaxNewTokensLimit) {
    return Status::InvalidArgument(
        fmt::format("max_new_tokens = {} must be in [1, {}]", args.max_new_tokens, kMaxNewTokensLimit));
  }
  args.use_kv_cache = !request.has_use_kv_cache() || request.use_kv_cache();
  const std::vector<int32_t> banned = text::DefaultBannedIds(state.special());
  StatusOr<sampling::SamplingParams> sampling = SamplingFromProto(request.sampling(), state.config().vocab_size, banned);
  if (!sampling.ok()) return sampling.status();
  args.sampling = std::move(sampling).value();
  return args;
}

v1::Response ChatResult(const text::Tokenizer& tokenizer, const engine::TurnOutcome& outcome) {
  const engine::GenerateResult& result = outcome.generation;
  std::vector<int32_t> reply = result.new_tokens;
  if (result.stop_reason == engine::StopReason::kStopToken && !reply.empty()) reply.pop_back();  // the eot
  v1::Response response;
  v1::ChatResponse& chat = *response.mutable_chat();
  chat.set_reply(tokenizer.Decode(reply));
  chat.mutable_reply_ids()->Add(reply.begin(), reply.end());
  chat.set_stop_reason(StopReasonToProto(result.stop_reason));
  chat.set_truncated_turns(outcome.truncated_turns);
  chat.set_session_length(outcome.session.length());
  *chat.mutable_stats() = StatsToProto(result, outcome.queue_ms);
  return response;
}

}  // namespace

engine::TurnResult StartChat(engine::EngineState& state, const engine::Work& work, server::Job& job,
                             const v1::ChatRequest& request) {
  StatusOr<engine::ChatTurnArgs> args = ChatArgs(state, request);
  if (!args.ok()) return args.status();
  const text::Tokenizer& tokenizer = state.tokenizer();
  engine::TurnCallbacks callbacks;
  if (request.stream()) {
    callbacks.on_token = [&job, text = std::make_shared<text::TextStream>(tokenizer)](
                             const engine::StepEvent& event) {
      v1::TokenEvent token;
      token.set_id(event.id);
      token.set_index(event.index);
      token.set_text(text->Add(event.id, event.last));  // eot decodes to nothing: it only flushes
      job.SendEvent(std::move(token));
    };
  }
  callbacks.on_commit = [&job, &tokenizer](const engine::TurnOutcome& outcome) {
    job.Finish(ChatResult(tokenizer, outcome));
  };
  return engine::StartChatTurn(state, work, *args, std::move(callbacks));
}

}  // namespace niels::daemon::handlers
