#include "daemon/engine/chat_turn.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "daemon/engine/template_chat_turn.h"
#include "daemon/text/text_stream.h"

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

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

// niels_gpt's turn: appends [usr] text [eot] [asst] and the reply to the history.
TurnResult StartNativeChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                               ChatCallbacks callbacks) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const text::ChatFormat& format = *state.chat_format();
  const int32_t eot = format.stop_ids().front();
  const int64_t context = state.config().context;

  // A turn is one user message and its reply: the history is [usr] text [eot] [asst] reply [eot].
  // `messages` may carry earlier turns first (user, assistant, ..., user: a conversation re-sent
  // whole, as the HTTP front sends it); each becomes a turn of its own.
  const bool with_tools = args.tools.has_value() && *args.tools != nullptr && !(*args.tools)->empty();
  bool alternating = args.messages.size() % 2 == 1 || args.messages.empty();
  for (size_t i = 0; i < args.messages.size() && alternating; ++i) {
    const text::ChatMessage& message = args.messages[i];
    alternating = message.role == (i % 2 == 0 ? text::Role::kUser : text::Role::kAssistant) &&
                  message.tool_calls.empty() && message.reasoning.empty();
  }
  if (args.append_only || !alternating || with_tools || args.tool_choice.mode == ToolChoice::Mode::kRequired ||
      args.tool_choice.mode == ToolChoice::Mode::kNamed) {
    return Status::InvalidArgument(
        "messages: the token-native chat format takes user and assistant messages in turn, ending with a user "
        "message (no append_only, tool messages, tool calls, reasoning or tools)");
  }
  const std::string& user_text = args.messages.empty() ? args.user_text : args.messages.back().content;
  if (args.keep_messages && (*args.keep_messages % 2 != 0 || *args.keep_messages > 2 * session.turns().size())) {
    return Status::InvalidArgument(fmt::format(
        "keep_messages = {} must be even (whole turns: a user message and its reply) and in [0, {}]",
        *args.keep_messages, 2 * session.turns().size()));
  }
  // The earlier turns' ids, and where each ends within `turn`.
  std::vector<int32_t> turn;
  std::vector<int64_t> earlier_ends;
  for (size_t i = 0; i + 1 < args.messages.size(); i += 2) {
    StatusOr<text::ChatPrompt> asked = format.EncodeTurn(std::nullopt, {}, args.messages[i].content, args.options);
    if (!asked.ok()) return asked.status();
    StatusOr<std::vector<int32_t>> answered = state.tokenizer().Encode(args.messages[i + 1].content);
    if (!answered.ok()) return answered.status();
    turn.insert(turn.end(), asked->ids.begin(), asked->ids.end());
    turn.insert(turn.end(), answered->begin(), answered->end());
    turn.push_back(eot);
    earlier_ends.push_back(static_cast<int64_t>(turn.size()));
  }
  StatusOr<text::ChatPrompt> encoded = format.EncodeTurn(std::nullopt, {}, user_text, args.options);
  if (!encoded.ok()) return encoded.status();
  turn.insert(turn.end(), encoded->ids.begin(), encoded->ids.end());
  const int64_t turn_length = static_cast<int64_t>(turn.size());

  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  if (args.keep_messages && *args.keep_messages / 2 < session.turns().size()) {
    const size_t keep = *args.keep_messages / 2;
    session.Rewind(keep, keep == 0 ? session.system_end() : session.turns()[keep - 1].end);
  }
  CloseLastTurn(session, eot);
  StatusOr<size_t> dropped = TurnsToDrop(session, turn_length, ChatReplyRoom(args.max_new_tokens, context), context,
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

  std::shared_ptr<StopStringRule> stop = MakeChatStopRule(state, args);
  GenerateOptions options = ChatGenerateOptions(state, args, format, stop);
  // The turn's span is recorded when it commits; a reply cut by max_new_tokens (or a stop string)
  // gets its eot.
  const int64_t turn_begin = session.length();
  auto reply = std::make_shared<ChatReply>();
  Turn::SessionCommit commit = [turn_begin, earlier_ends, eot, context, reply, stop, &state](
                                   sessions::Session& s, const GenerateResult& result) {
    *reply = MakeChatReply(state, result, /*starts_in_reasoning=*/false, stop.get(), nullptr);
    int64_t begin = turn_begin;
    for (const int64_t end : earlier_ends) {
      s.AddTurn({begin, turn_begin + end});
      begin = turn_begin + end;
    }
    s.AddTurn({begin, s.length()});
    if (result.stop_reason != StopReason::kStopToken && s.length() < context) s.AppendToLastTurn(eot);
  };
  TurnCallbacks turn_callbacks = MakeChatTurnCallbacks(state, std::move(callbacks), false, reply, stop, nullptr);
  return TurnStart{std::make_unique<Turn>(state, work, session, std::move(snapshot), std::move(turn),
                                          std::move(options), std::move(turn_callbacks), std::move(commit),
                                          static_cast<int32_t>(*dropped))};
}

// Whether the turn renders the session's conversation as messages (see chat_turn.h): always for a
// template; for the token-native format when the session or the turn has tools or the session has
// messages. INVALID_ARGUMENT when such a turn finds token-native turns in the session.
StatusOr<bool> InConversationMode(const EngineState& state, const sessions::Session& session,
                                  const ChatTurnArgs& args) {
  if (state.chat_format()->kind() == text::ChatFormat::Kind::kTemplate) return true;
  const auto any = [](const std::shared_ptr<const std::vector<text::ToolDefinition>>& tools) {
    return tools != nullptr && !tools->empty();
  };
  // A session that had tools or messages stays in the mode when this turn clears its tools.
  const bool turn_tools = args.tools && any(*args.tools);
  if (!turn_tools && !any(session.tools()) && session.messages().empty()) return false;
  if (!session.turns().empty()) {
    return Status::InvalidArgument(
        "tools: this session already holds token-native turns; a niels_gpt session takes tools from its first turn "
        "on (set them at CreateSession or with the first Chat)");
  }
  return true;
}

}  // namespace

std::shared_ptr<StopStringRule> MakeChatStopRule(const EngineState& state, const ChatTurnArgs& args) {
  if (args.stop_strings.empty()) return nullptr;
  return std::make_shared<StopStringRule>(state.tokenizer(), args.stop_strings);
}

GenerateOptions ChatGenerateOptions(const EngineState& state, const ChatTurnArgs& args, const text::ChatFormat& format,
                                    std::shared_ptr<StopStringRule> stop) {
  GenerateOptions options;
  options.text_stop = std::move(stop);
  options.sampling = args.sampling;
  options.max_new_tokens = args.max_new_tokens;
  options.use_kv_cache = args.use_kv_cache;
  options.stop_ids = format.stop_ids();
  options.want_logprobs = args.want_logprobs;
  options.top_logprobs = args.top_logprobs;
  options.sampled_top_logprobs = args.sampled_top_logprobs;
  if (args.constraint != nullptr) options.constraint = {args.constraint, state.constraint_vocabulary, {}};
  return options;
}

int64_t ChatReplyRoom(int32_t max_new_tokens, int64_t context) {
  return std::max<int64_t>(1, std::min<int64_t>(max_new_tokens, context / 4));
}

ChatReply MakeChatReply(const EngineState& state, const GenerateResult& result, bool starts_in_reasoning,
                        const StopStringRule* stop, const ReplyToolParsing* tools) {
  ChatReply reply;
  reply.ids = result.new_tokens;
  if (result.stop_reason == StopReason::kStopToken && !reply.ids.empty()) reply.ids.pop_back();
  const bool stopped_by_text = result.stop_reason == StopReason::kStopString && stop != nullptr;
  if (stopped_by_text) reply.stop_string = stop->matched().value_or("");
  const text::ReplyDelta split = text::ReplySplitter::Split(
      stopped_by_text ? stop->text() : state.tokenizer().Decode(reply.ids), state.chat_format()->reasoning_tags(),
      starts_in_reasoning);
  reply.answer = split.answer;
  reply.reasoning = split.reasoning;
  if (tools != nullptr) {
    auto [content, calls] =
        ReplyToolCalls::Parse(tools->family, *tools->tools, tools->calls_allowed, tools->ids, reply.answer);
    reply.answer = std::move(content);
    reply.tool_calls = std::move(calls);
  }
  return reply;
}

TurnCallbacks MakeChatTurnCallbacks(const EngineState& state, ChatCallbacks callbacks, bool starts_in_reasoning,
                                    std::shared_ptr<const ChatReply> reply, std::shared_ptr<StopStringRule> stop,
                                    const ReplyToolParsing* tools) {
  TurnCallbacks turn_callbacks;
  if (callbacks.on_token) {
    struct Stream {
      text::TextStream text;
      text::ReplySplitter splitter;
      std::optional<ReplyToolCalls> calls;
    };
    auto stream = std::make_shared<Stream>(
        Stream{text::TextStream(state.tokenizer()),
               text::ReplySplitter(state.chat_format()->reasoning_tags(), starts_in_reasoning), std::nullopt});
    if (tools != nullptr) stream->calls.emplace(tools->family, *tools->tools, tools->calls_allowed, tools->ids);
    turn_callbacks.on_token = [stream, stop, on_token = std::move(callbacks.on_token)](const StepEvent& event) {
      // A stop id decodes to nothing: it only flushes. With stop strings the rule (fed this id
      // already) says what may be shown.
      text::ReplyDelta delta =
          stream->splitter.Add(stop != nullptr ? stop->TakeShown() : stream->text.Add(event.id, event.last));
      if (event.last) {
        const text::ReplyDelta rest = stream->splitter.Finish();
        delta.answer += rest.answer;
        delta.reasoning += rest.reasoning;
      }
      std::vector<ToolCallPiece> calls;
      if (stream->calls) {
        // The answer goes through the reply's tool-call parser: content and completed calls.
        ReplyToolCalls::Piece piece = stream->calls->Feed(delta.answer);
        if (event.last) {
          ReplyToolCalls::Piece rest = stream->calls->Finish();
          piece.content += rest.content;
          for (ToolCallPiece& call : rest.calls) piece.calls.push_back(std::move(call));
        }
        delta.answer = std::move(piece.content);
        calls = std::move(piece.calls);
      }
      on_token(event, delta, calls);
    };
  }
  if (callbacks.on_commit) {
    turn_callbacks.on_commit = [reply = std::move(reply), on_commit = std::move(callbacks.on_commit)](
                                   const TurnOutcome& outcome) { on_commit(outcome, *reply); };
  }
  return turn_callbacks;
}

StatusOr<const sessions::Session*> AppendChatMessages(EngineState& state, const Work& work, const ChatTurnArgs& args) {
  const text::ChatFormat* format = state.chat_format();
  if (format == nullptr) return state.chat_format_status;
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  StatusOr<bool> conversation = InConversationMode(state, **found, args);
  if (!conversation.ok()) return conversation.status();
  if (!*conversation) {
    return Status::InvalidArgument(
        "append_only: the token-native chat format takes one user message per Chat (a session with tools takes "
        "messages)");
  }
  return AppendTemplateMessages(state, work, args, *state.conversation_format());
}

TurnResult StartChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args, ChatCallbacks callbacks) {
  const text::ChatFormat* format = state.chat_format();
  if (format == nullptr) return state.chat_format_status;
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  StatusOr<bool> conversation = InConversationMode(state, **found, args);
  if (!conversation.ok()) return conversation.status();
  if (*conversation) return StartTemplateChatTurn(state, work, args, std::move(callbacks), *state.conversation_format());
  return StartNativeChatTurn(state, work, args, std::move(callbacks));
}

}  // namespace niels::daemon::engine
