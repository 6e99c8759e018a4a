#include "daemon/engine/template_chat_turn.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// The length of the longest common prefix of two id lists.
size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(mismatch.first - a.begin());
}

// The fewest oldest exchanges to leave out so that the conversation's text, the system prompt and
// the new user message stay within kMaxConversationBytes. INVALID_ARGUMENT when they do not even
// without any exchange.
StatusOr<size_t> ExchangesOverBytes(const sessions::Session& session, size_t user_bytes) {
  const std::vector<text::ChatMessage>& messages = session.messages();
  size_t bytes = user_bytes + session.system_prompt_text().size();
  for (const text::ChatMessage& message : messages) bytes += message.content.size() + message.reasoning.size();
  size_t drop = 0;
  while (bytes > kMaxConversationBytes && 2 * drop < messages.size()) {
    for (size_t i = 2 * drop; i < 2 * drop + 2; ++i) bytes -= messages[i].content.size() + messages[i].reasoning.size();
    ++drop;
  }
  if (bytes > kMaxConversationBytes) {
    return Status::InvalidArgument(fmt::format(
        "the system prompt and this message are {} bytes; a conversation keeps at most {} bytes of text", bytes,
        kMaxConversationBytes));
  }
  return drop;
}

// Renders the turn with the oldest exchanges left out, each count at most once.
class TurnRenderer {
 public:
  TurnRenderer(const text::ChatFormat& format, const sessions::Session& session, const ChatTurnArgs& args)
      : format_(format), session_(session), args_(args) {}

  StatusOr<const text::ChatPrompt*> Without(size_t drop) {
    auto it = rendered_.find(drop);
    if (it == rendered_.end()) {
      std::optional<std::string> system;
      if (session_.has_system_prompt()) system = session_.system_prompt_text();
      const std::span<const text::ChatMessage> kept = std::span(session_.messages()).subspan(2 * drop);
      StatusOr<text::ChatPrompt> prompt = format_.EncodeTurn(system, kept, args_.user_text, args_.options);
      if (!prompt.ok()) return prompt.status();
      it = rendered_.emplace(drop, std::move(prompt).value()).first;
    }
    return &it->second;
  }

 private:
  const text::ChatFormat& format_;
  const sessions::Session& session_;
  const ChatTurnArgs& args_;
  std::map<size_t, text::ChatPrompt> rendered_;
};

}  // namespace

StatusOr<size_t> ExchangesToDrop(const std::function<StatusOr<int64_t>(size_t drop)>& tokens_without,
                                 size_t exchanges, size_t min_drop, int64_t room, int64_t context, double keep) {
  if (!(keep >= 0.0)) keep = 0.0;  // NaN too
  const int64_t low_water = static_cast<int64_t>(std::min(keep, 1.0) * static_cast<double>(context));
  StatusOr<int64_t> first = tokens_without(min_drop);
  if (!first.ok()) return first.status();
  size_t drop = min_drop;
  if (*first + room > context && min_drop < exchanges) {
    size_t lo = min_drop + 1;
    size_t hi = exchanges;  // all of them when no count is good
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      StatusOr<int64_t> length = tokens_without(mid);
      if (!length.ok()) return length.status();
      if (*length + room <= context && *length <= low_water) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    drop = hi;
  }
  StatusOr<int64_t> kept = tokens_without(drop);
  if (!kept.ok()) return kept.status();
  if (*kept >= context) {
    return Status::InvalidArgument(fmt::format(
        "this turn renders to {} tokens with the system prompt and no earlier exchange; that leaves no room for "
        "a reply in the model's context of {} tokens",
        *kept, context));
  }
  return drop;
}

TurnResult StartTemplateChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                                 ChatCallbacks callbacks) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.uid);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const text::ChatFormat& format = *state.chat_format();
  const int64_t context = state.config().context;

  // Render first: a template error leaves the session untouched.
  StatusOr<size_t> min_drop = ExchangesOverBytes(session, args.user_text.size());
  if (!min_drop.ok()) return min_drop.status();
  TurnRenderer render(format, session, args);
  const auto tokens_without = [&render](size_t drop) -> StatusOr<int64_t> {
    StatusOr<const text::ChatPrompt*> prompt = render.Without(drop);
    if (!prompt.ok()) return prompt.status();
    return static_cast<int64_t>((*prompt)->ids.size());
  };
  StatusOr<size_t> dropped = ExchangesToDrop(tokens_without, session.messages().size() / 2, *min_drop,
                                             ChatReplyRoom(args.max_new_tokens, context), context,
                                             state.options.context_keep);
  if (!dropped.ok()) return dropped.status();
  StatusOr<const text::ChatPrompt*> rendered = render.Without(*dropped);
  if (!rendered.ok()) return rendered.status();
  const text::ChatPrompt prompt = **rendered;  // a copy: the renderer refers to the session

  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  session.DropOldestExchanges(*dropped);
  bool must_wait = false;
  const int64_t final_length = static_cast<int64_t>(prompt.ids.size()) + args.max_new_tokens;
  const Status ready = PrepareCache(state, session, snapshot, args.use_kv_cache, final_length, &must_wait);
  if (!ready.ok() || must_wait) {
    session.Restore(std::move(snapshot));
    if (!ready.ok()) return ready;
    return TurnStart{nullptr, /*wait_for_memory=*/true};
  }
  // Keep what the history and the new rendering share (the cache stays valid up to there); the turn
  // processes the rest, at least one id.
  const size_t common = std::min(CommonPrefix(session.tokens(), prompt.ids), prompt.ids.size() - 1);
  session.TruncateHistory(static_cast<int64_t>(common), snapshot);
  std::vector<int32_t> input(prompt.ids.begin() + static_cast<std::ptrdiff_t>(common), prompt.ids.end());

  std::shared_ptr<StopStringRule> stop = MakeChatStopRule(state, args);
  GenerateOptions options = ChatGenerateOptions(state, args, format, stop);
  auto reply = std::make_shared<ChatReply>();
  const bool starts_in_reasoning = prompt.starts_in_reasoning;
  Turn::SessionCommit commit = [reply, stop, &state, starts_in_reasoning, user_text = args.user_text](
                                   sessions::Session& s, const GenerateResult& result) {
    *reply = MakeChatReply(state, result, starts_in_reasoning, stop.get());
    s.AddExchange({text::Role::kUser, user_text, ""}, {text::Role::kAssistant, reply->answer, reply->reasoning});
  };
  TurnCallbacks turn_callbacks = MakeChatTurnCallbacks(state, std::move(callbacks), starts_in_reasoning, reply, stop);
  return TurnStart{std::make_unique<Turn>(state, work, session, std::move(snapshot), std::move(input),
                                          std::move(options), std::move(turn_callbacks), std::move(commit),
                                          static_cast<int32_t>(*dropped))};
}

}  // namespace niels::daemon::engine
