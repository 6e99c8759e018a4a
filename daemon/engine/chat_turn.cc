// Chat: one user/assistant turn with the token-native template, the context-limit policy
// (engine.h), streaming, and atomic restore on cancel or failure.
#include <algorithm>
#include <memory>
#include <fmt/format.h>

#include "daemon/engine/chat_template.h"
#include "daemon/engine/engine_state.h"
#include "daemon/engine/proto_convert.h"
#include "daemon/engine/text_stream.h"
#include "daemon/engine/turn.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;
using common::Status;
using common::StatusOr;

namespace {

// Tokens kept free for the reply when fitting a turn into the context.
int64_t ReplyRoom(int32_t max_new_tokens, int64_t context) {
  return std::max<int64_t>(1, std::min<int64_t>(max_new_tokens, context / 4));
}

// A last turn that ended without eot (max_new_tokens at the context limit) gets it now.
void CloseLastTurn(Session& session, int32_t eot) {
  const auto& turns = session.turns();
  if (!turns.empty() && turns.back().end == session.length() && session.tokens().back() != eot) {
    session.AppendToLastTurn(eot);
  }
}

// How many of the oldest turns to drop so that history + turn + room fits T (as many as needed, at
// most all). INVALID_ARGUMENT when even without any turn there is no room for one reply token.
StatusOr<size_t> TurnsToDrop(const Session& session, int64_t turn_length, int64_t room, int64_t context) {
  size_t drop = 0;
  while (drop < session.turns().size() && session.LengthWithoutOldestTurns(drop) + turn_length + room > context) {
    ++drop;
  }
  const int64_t kept = session.LengthWithoutOldestTurns(drop);
  if (kept + turn_length >= context) {
    return Status::InvalidArgument(fmt::format(
        "this turn is {} tokens; with the {} tokens that must stay (the system prompt and any raw "
        "tokens) it leaves no room for a reply in the model's context of {} tokens",
        turn_length, kept, context));
  }
  return drop;
}

struct ChatArgs {
  int32_t max_new_tokens = kDefaultMaxNewTokens;
  bool use_kv_cache = true;
  model::SamplingParams sampling;
};

StatusOr<ChatArgs> ValidateChat(const EngineState& state, const v1::ChatRequest& request) {
  if (request.user_text().empty()) return Status::InvalidArgument("user_text is empty");
  ChatArgs args;
  if (request.has_max_new_tokens()) args.max_new_tokens = request.max_new_tokens();
  if (args.max_new_tokens < 1 || args.max_new_tokens > kMaxNewTokensLimit) {
    return Status::InvalidArgument(
        fmt::format("max_new_tokens = {} must be in [1, {}]", args.max_new_tokens, kMaxNewTokensLimit));
  }
  if (request.has_use_kv_cache()) args.use_kv_cache = request.use_kv_cache();
  const std::vector<int32_t> banned = DefaultBannedIds(state.tokenizer());
  StatusOr<model::SamplingParams> sampling =
      SamplingFromProto(request.sampling(), state.config().vocab_size, banned);
  if (!sampling.ok()) return sampling.status();
  args.sampling = std::move(sampling).value();
  return args;
}

v1::Response ChatResult(const EngineState& state, const JobContext& job, const Session& session,
                        const GenerateResult& result, const ChatArgs& args, size_t dropped) {
  std::vector<int32_t> reply = result.new_tokens;
  if (result.stop_reason == StopReason::kStopToken && !reply.empty()) reply.pop_back();  // the eot
  v1::Response response;
  v1::ChatResponse& chat = *response.mutable_chat();
  chat.set_reply(state.tokenizer().Decode(reply));
  chat.mutable_reply_ids()->Add(reply.begin(), reply.end());
  chat.set_stop_reason(StopReasonToProto(result.stop_reason));
  chat.set_truncated_turns(static_cast<int32_t>(dropped));
  chat.set_session_length(session.length());
  *chat.mutable_stats() = StatsToProto(result, args.use_kv_cache, job.queue_ms());
  return response;
}

}  // namespace

TurnResult StartChat(EngineState& state, JobContext& job, const v1::ChatRequest& request) {
  StatusOr<ChatArgs> args = ValidateChat(state, request);
  if (!args.ok()) return args.status();
  StatusOr<Session*> found = state.sessions.Find(request.session_id(), job.uid());
  if (!found.ok()) return found.status();
  Session& session = **found;
  const model::Tokenizer& tokenizer = state.tokenizer();
  const int32_t eot = tokenizer.special().eot;
  const int64_t context = state.config().context;

  std::vector<int32_t> turn = EncodeMessage(tokenizer, Role::kUser, request.user_text());
  const std::vector<int32_t> prompt = GenerationPrompt(tokenizer);
  turn.insert(turn.end(), prompt.begin(), prompt.end());
  const int64_t turn_length = static_cast<int64_t>(turn.size());

  Session::Snapshot snapshot = session.TakeSnapshot();
  CloseLastTurn(session, eot);
  StatusOr<size_t> dropped = TurnsToDrop(session, turn_length, ReplyRoom(args->max_new_tokens, context), context);
  Status ready = dropped.status();
  bool must_wait = false;
  if (ready.ok()) {
    session.DropOldestTurns(*dropped, snapshot);
    ready = PrepareCache(state, session, snapshot, args->use_kv_cache,
                         session.length() + turn_length + args->max_new_tokens, &must_wait);
  }
  if (!ready.ok() || must_wait) {
    session.Restore(std::move(snapshot));
    if (!ready.ok()) return ready;
    return TurnStart{nullptr, /*wait_for_memory=*/true};
  }

  GenerateOptions options;
  options.sampling = args->sampling;
  options.max_new_tokens = args->max_new_tokens;
  options.use_kv_cache = args->use_kv_cache;
  options.stop_ids = {eot};
  EventBuilder stream_event;
  if (request.stream()) {
    stream_event = [text = std::make_shared<TextStream>(tokenizer)](const StepEvent& event, bool last) {
      v1::TokenEvent token;
      token.set_id(event.id);
      token.set_index(event.index);
      token.set_text(text->Add(event.id, last));  // eot decodes to nothing: it only flushes
      return token;
    };
  }
  const int64_t turn_begin = session.length();
  Session* session_ptr = &session;
  const ChatArgs chat_args = *args;
  const size_t dropped_turns = *dropped;
  JobContext* job_ptr = &job;
  EngineState* state_ptr = &state;
  TurnFinisher finish = [=](const GenerateResult& result) -> HandlerResult {
    Session& s = *session_ptr;
    s.AddTurn({turn_begin, s.length()});
    if (result.stop_reason != StopReason::kStopToken && s.length() < context) s.AppendToLastTurn(eot);
    return ChatResult(*state_ptr, *job_ptr, s, result, chat_args, dropped_turns);
  };
  return TurnStart{std::make_unique<Turn>(state, job, session, std::move(snapshot), std::move(turn),
                                          std::move(options), std::move(stream_event), std::move(finish))};
}

}  // namespace niels::daemon::engine
