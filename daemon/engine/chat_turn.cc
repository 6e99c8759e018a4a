#include "daemon/engine/chat_turn.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/text/chat_template.h"

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// Tokens kept free for the reply when fitting a turn into the context.
int64_t ReplyRoom(int32_t max_new_tokens, int64_t context) {
  return std::max<int64_t>(1, std::min<int64_t>(max_new_tokens, context / 4));
}

// A last turn that ended without eot (max_new_tokens at the context limit) gets it now.
void CloseLastTurn(sessions::Session& session, int32_t eot) {
  const auto& turns = session.turns();
  if (!turns.empty() && turns.back().end == session.length() && session.tokens().back() != eot) {
    session.AppendToLastTurn(eot);
  }
}

// How many of the oldest turns to drop: none when history + turn + room fits T; otherwise as many as
// it takes (at most all) for history + turn + room to fit T and history + turn to be at most the
// low-water mark `keep` x T. INVALID_ARGUMENT when even without any turn there is no room for one
// reply token.
StatusOr<size_t> TurnsToDrop(const sessions::Session& session, int64_t turn_length, int64_t room, int64_t context,
                             double keep) {
  const auto fits = [&](size_t drop) { return session.LengthWithoutOldestTurns(drop) + turn_length + room <= context; };
  if (!(keep >= 0.0)) keep = 0.0;  // NaN too
  const int64_t low_water = static_cast<int64_t>(std::min(keep, 1.0) * static_cast<double>(context));
  size_t drop = 0;
  if (!fits(0)) {
    while (drop < session.turns().size() &&
           (!fits(drop) || session.LengthWithoutOldestTurns(drop) + turn_length > low_water)) {
      ++drop;
    }
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

}  // namespace

TurnResult StartChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                         TurnCallbacks callbacks) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.uid);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const text::Tokenizer& tokenizer = state.tokenizer();
  const int32_t eot = state.special().eot;
  const int64_t context = state.config().context;

  StatusOr<std::vector<int32_t>> encoded = text::EncodeMessage(tokenizer, state.special(), text::Role::kUser, args.user_text);
  if (!encoded.ok()) return encoded.status();
  std::vector<int32_t> turn = std::move(*encoded);
  const std::vector<int32_t> prompt = text::GenerationPrompt(state.special());
  turn.insert(turn.end(), prompt.begin(), prompt.end());
  const int64_t turn_length = static_cast<int64_t>(turn.size());

  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  CloseLastTurn(session, eot);
  StatusOr<size_t> dropped = TurnsToDrop(session, turn_length, ReplyRoom(args.max_new_tokens, context), context,
                                         state.options.context_keep);
  Status ready = dropped.status();
  bool must_wait = false;
  if (ready.ok()) {
    session.DropOldestTurns(*dropped, snapshot);
    ready = PrepareCache(state, session, snapshot, args.use_kv_cache,
                         session.length() + turn_length + args.max_new_tokens, &must_wait);
  }
  if (!ready.ok() || must_wait) {
    session.Restore(std::move(snapshot));
    if (!ready.ok()) return ready;
    return TurnStart{nullptr, /*wait_for_memory=*/true};
  }

  GenerateOptions options;
  options.sampling = args.sampling;
  options.max_new_tokens = args.max_new_tokens;
  options.use_kv_cache = args.use_kv_cache;
  options.stop_ids = {eot};
  // The turn's span is recorded when it commits; a reply cut by max_new_tokens gets its eot.
  const int64_t turn_begin = session.length();
  Turn::SessionCommit commit = [turn_begin, eot, context](sessions::Session& s, const GenerateResult& result) {
    s.AddTurn({turn_begin, s.length()});
    if (result.stop_reason != StopReason::kStopToken && s.length() < context) s.AppendToLastTurn(eot);
  };
  return TurnStart{std::make_unique<Turn>(state, work, session, std::move(snapshot), std::move(turn),
                                          std::move(options), std::move(callbacks), std::move(commit),
                                          static_cast<int32_t>(*dropped))};
}

}  // namespace niels::daemon::engine
