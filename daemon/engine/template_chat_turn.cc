#include "daemon/engine/template_chat_turn.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include "daemon/engine/sampled_replies.h"
#include "daemon/sampling/token_id_set.h"

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// Whether `sampling` leaves none of `stop_ids` to sample (each banned, or biased to -inf): a reply
// held to a grammar could then never end.
bool EveryStopIdBanned(std::span<const int32_t> stop_ids, const sampling::SamplingParams& sampling) {
  std::vector<int32_t> banned = sampling.banned_ids;
  for (const sampling::TokenBias& bias : sampling.logit_bias) {
    if (std::isinf(bias.bias) && bias.bias < 0) banned.push_back(bias.id);
  }
  const sampling::TokenIdSet set(banned);
  return std::all_of(stop_ids.begin(), stop_ids.end(), [&set](int32_t id) { return set.Contains(id); });
}

// The length of the longest common prefix of two id lists.
size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(mismatch.first - a.begin());
}

// The bytes of a message's text a conversation keeps.
size_t MessageBytes(const text::ChatMessage& message) {
  size_t bytes = message.content.size() + message.reasoning.size() + message.tool_call_id.size() + message.name.size();
  for (const text::ToolCall& call : message.tool_calls) bytes += call.id.size() + call.name.size() + call.arguments.size();
  return bytes;
}

// The conversation a turn renders: the session's messages kept (keep_messages), of which the
// oldest exchanges may be left out, then the turn's new messages, and the tools.
struct Conversation {
  std::vector<text::ChatMessage> kept;
  std::vector<text::ChatMessage> added;
  std::shared_ptr<const std::vector<text::ToolDefinition>> tools;
  // Where exchange k of `kept` begins: 0, then every user message after the first message. An
  // exchange is a user message and all that follows it up to the next one (the reply, its tool
  // calls and their results), so leaving one out never splits a call from its result.
  std::vector<size_t> exchange_starts;

  size_t exchanges() const { return exchange_starts.size(); }
  // The oldest exchanges that may be left out: all, but for the one holding a call that a new tool
  // message answers, and those after it (a result never outlives its call).
  size_t droppable = 0;
  // The index in `kept` where the rendering starts with `drop` exchanges left out.
  size_t Cut(size_t drop) const { return drop < exchange_starts.size() ? exchange_starts[drop] : kept.size(); }
  // The messages rendered with `drop` exchanges left out.
  std::vector<text::ChatMessage> Without(size_t drop) const {
    std::vector<text::ChatMessage> messages(kept.begin() + static_cast<std::ptrdiff_t>(Cut(drop)), kept.end());
    messages.insert(messages.end(), added.begin(), added.end());
    return messages;
  }
};

StatusOr<Conversation> BuildConversation(const EngineState& state, const sessions::Session& session,
                                         const ChatTurnArgs& args) {
  Conversation conversation;
  const std::vector<text::ChatMessage>& messages = session.messages();
  size_t keep = messages.size();
  if (args.keep_messages) {
    if (*args.keep_messages > messages.size()) {
      return Status::InvalidArgument(fmt::format(
          "keep_messages = {} must be in [0, {}] (the messages of the conversation after the system prompt)",
          *args.keep_messages, messages.size()));
    }
    keep = *args.keep_messages;
  }
  conversation.kept.assign(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(keep));
  if (args.messages.empty() && !args.user_text.empty()) {
    conversation.added.push_back({text::Role::kUser, args.user_text, ""});
  } else {
    conversation.added = args.messages;
  }
  conversation.tools = args.tools ? *args.tools : session.tools();
  if (conversation.tools != nullptr && conversation.tools->empty()) conversation.tools = nullptr;
  if (conversation.tools != nullptr && !state.tool_call_family) {
    return Status::InvalidArgument(
        "tools: this model's chat template has no tool-call format nielsd knows (InfoResponse.tool_call_format is "
        "empty)");
  }
  // Every call id once; every tool result answers a call made before it.
  std::set<std::string> ids;
  for (const text::ChatMessage& message : conversation.kept) {
    for (const text::ToolCall& call : message.tool_calls) ids.insert(call.id);
  }
  for (size_t i = 0; i < conversation.added.size(); ++i) {
    const text::ChatMessage& message = conversation.added[i];
    for (size_t j = 0; j < message.tool_calls.size(); ++j) {
      if (!ids.insert(message.tool_calls[j].id).second) {
        return Status::InvalidArgument(fmt::format(
            "messages[{}].tool_calls[{}].id: \"{}\" is already the id of a call in the conversation", i, j,
            message.tool_calls[j].id));
      }
    }
    if (message.role == text::Role::kTool && !ids.contains(message.tool_call_id)) {
      return Status::InvalidArgument(fmt::format(
          "messages[{}].tool_call_id: \"{}\" names no call of the conversation before it", i, message.tool_call_id));
    }
  }
  for (size_t i = 1; i < conversation.kept.size(); ++i) {
    if (conversation.kept[i].role == text::Role::kUser) conversation.exchange_starts.push_back(i);
  }
  if (!conversation.kept.empty()) conversation.exchange_starts.insert(conversation.exchange_starts.begin(), 0);
  std::set<std::string_view> answered;
  for (const text::ChatMessage& message : conversation.added) {
    if (message.role == text::Role::kTool) answered.insert(message.tool_call_id);
  }
  conversation.droppable = conversation.exchanges();
  for (size_t i = 0; i < conversation.kept.size() && conversation.droppable == conversation.exchanges(); ++i) {
    for (const text::ToolCall& call : conversation.kept[i].tool_calls) {
      if (!answered.contains(call.id)) continue;
      // The exchange that holds message i: the last one starting at or before it.
      conversation.droppable = static_cast<size_t>(
          std::upper_bound(conversation.exchange_starts.begin(), conversation.exchange_starts.end(), i) -
          conversation.exchange_starts.begin() - 1);
      break;
    }
  }
  return conversation;
}

// The fewest oldest exchanges to leave out so that the conversation's text, the system prompt and
// the new messages stay within kMaxConversationBytes. INVALID_ARGUMENT when they do not even
// without any exchange.
StatusOr<size_t> ExchangesOverBytes(const sessions::Session& session, const Conversation& conversation) {
  size_t bytes = session.system_prompt_text().size();
  for (const text::ChatMessage& message : conversation.kept) bytes += MessageBytes(message);
  for (const text::ChatMessage& message : conversation.added) bytes += MessageBytes(message);
  size_t drop = 0;
  while (bytes > kMaxConversationBytes && drop < conversation.droppable) {
    for (size_t i = conversation.Cut(drop); i < conversation.Cut(drop + 1); ++i) {
      bytes -= MessageBytes(conversation.kept[i]);
    }
    ++drop;
  }
  if (bytes > kMaxConversationBytes) {
    return Status::InvalidArgument(fmt::format(
        "the system prompt and the new messages are {} bytes; a conversation keeps at most {} bytes of text", bytes,
        kMaxConversationBytes));
  }
  return drop;
}

// Renders the turn with the oldest exchanges left out, each count at most once.
class TurnRenderer {
 public:
  TurnRenderer(const text::ChatFormat& format, const sessions::Session& session, const Conversation& conversation,
               const text::ChatOptions& options)
      : format_(format), session_(session), conversation_(conversation), options_(options) {}

  StatusOr<const text::ChatPrompt*> Without(size_t drop) {
    auto it = rendered_.find(drop);
    if (it == rendered_.end()) {
      std::optional<std::string> system;
      if (session_.has_system_prompt()) system = session_.system_prompt_text();
      const std::vector<text::ChatMessage> messages = conversation_.Without(drop);
      StatusOr<text::ChatPrompt> prompt = format_.EncodeConversation(system, messages, options_);
      if (!prompt.ok()) return prompt.status();
      it = rendered_.emplace(drop, std::move(prompt).value()).first;
    }
    return &it->second;
  }

 private:
  const text::ChatFormat& format_;
  const sessions::Session& session_;
  const Conversation& conversation_;
  const text::ChatOptions& options_;
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
        "this turn renders to {} tokens with every earlier exchange that may be dropped left out (the system "
        "prompt, and a tool call a result of this turn answers, are kept); that leaves no room for a reply in the "
        "model's context of {} tokens",
        *kept, context));
  }
  return drop;
}

StatusOr<const sessions::Session*> AppendTemplateMessages(EngineState& state, const Work& work,
                                                         const ChatTurnArgs& args, const text::ChatFormat& format) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  StatusOr<Conversation> conversation = BuildConversation(state, session, args);
  if (!conversation.ok()) return conversation.status();
  StatusOr<size_t> dropped = ExchangesOverBytes(session, *conversation);
  if (!dropped.ok()) return dropped.status();
  text::ChatOptions options = args.options;
  options.tools = conversation->tools;
  // The template must take the conversation now, not fail at the next turn.
  StatusOr<const text::ChatPrompt*> rendered =
      TurnRenderer(format, session, *conversation, options).Without(*dropped);
  if (!rendered.ok()) return rendered.status();
  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  std::vector<sessions::SampledReply> replies = session.sampled_replies();
  session.SetMessages(conversation->Without(*dropped));
  // The kept messages keep their places unless exchanges were left out.
  std::erase_if(replies, [&](const sessions::SampledReply& reply) {
    return *dropped > 0 || reply.message >= conversation->kept.size();
  });
  session.SetSampledReplies(std::move(replies));
  session.SetTools(conversation->tools);
  if (Status stored = state.sessions.Commit(session); !stored.ok()) {
    session.Restore(std::move(snapshot));
    return stored;
  }
  return &session;
}

TurnResult StartTemplateChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                                 ChatCallbacks callbacks, const text::ChatFormat& format) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  const int64_t context = state.config().context;

  // Render first: a template error leaves the session untouched.
  StatusOr<Conversation> built = BuildConversation(state, session, args);
  if (!built.ok()) return built.status();
  const Conversation& conversation = *built;
  text::ChatOptions chat_options = args.options;
  chat_options.tools = conversation.tools;
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> tool_constraint =
      ToolChoiceConstraint(state.tool_grammars, conversation.tools, args.tool_choice);
  if (!tool_constraint.ok()) return tool_constraint.status();
  const bool automatic = args.tool_choice.mode == ToolChoice::Mode::kAuto;
  if (*tool_constraint != nullptr && !automatic) {
    if (args.constraint != nullptr) {
      return Status::InvalidArgument("tool_choice: a reply constrained to tool calls cannot have a constraint too");
    }
    if (!args.stop_strings.empty()) {
      return Status::InvalidArgument(
          "stop_strings cannot be combined with a forced tool_choice: a reply of tool calls ends where its grammar does");
    }
    if (EveryStopIdBanned(format.stop_ids(), args.sampling)) {
      return Status::InvalidArgument(
          "sampling.banned_ids: a forced tool_choice needs an end-of-turn id that is not banned, or its calls could "
          "never end");
    }
  }
  StatusOr<size_t> min_drop = ExchangesOverBytes(session, conversation);
  if (!min_drop.ok()) return min_drop.status();
  TurnRenderer render(format, session, conversation, chat_options);
  const auto tokens_without = [&render](size_t drop) -> StatusOr<int64_t> {
    StatusOr<const text::ChatPrompt*> prompt = render.Without(drop);
    if (!prompt.ok()) return prompt.status();
    return static_cast<int64_t>((*prompt)->ids.size());
  };
  StatusOr<size_t> dropped = ExchangesToDrop(tokens_without, conversation.droppable, *min_drop,
                                             ChatReplyRoom(args.max_new_tokens, context), context,
                                             state.options.context_keep);
  if (!dropped.ok()) return dropped.status();
  StatusOr<const text::ChatPrompt*> rendered = render.Without(*dropped);
  if (!rendered.ok()) return rendered.status();
  const text::ChatPrompt prompt = **rendered;  // a copy: the renderer refers to the session
  std::vector<text::ChatMessage> messages = conversation.Without(*dropped);
  // The ids the model sampled for its earlier replies stand for them where the template writes each
  // as it did when the reply ended the conversation (sampled_replies.h). With exchanges left out the
  // rendering starts anew.
  std::vector<sessions::SampledReply> replies;
  if (*dropped == 0) {
    std::optional<std::string> system;
    if (session.has_system_prompt()) system = session.system_prompt_text();
    for (sessions::SampledReply reply : session.sampled_replies()) {
      if (reply.message >= conversation.kept.size() || reply.end > session.length() || reply.end <= 0) continue;
      if (reply.rendering.empty()) {
        StatusOr<std::vector<int32_t>> completed = format.EncodeCompleted(
            system, std::span(conversation.kept.data(), reply.message + 1), chat_options);
        if (!completed.ok()) continue;
        reply.rendering = LastSegment(*completed, format.stop_ids());
        if (reply.rendering.empty()) continue;
      }
      replies.push_back(std::move(reply));
    }
  }
  SplicedPrompt spliced = SpliceSampledReplies(session.tokens(), prompt.ids, format.stop_ids(), replies);
  if (static_cast<int64_t>(spliced.ids.size()) + ChatReplyRoom(args.max_new_tokens, context) > context) {
    spliced = SplicedPrompt{prompt.ids, {}};  // the template's own spelling is what fits
  }
  const std::vector<int32_t>& prompt_ids = spliced.ids;

  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  bool must_wait = false;
  const int64_t final_length = static_cast<int64_t>(prompt_ids.size()) + args.max_new_tokens;
  const Status ready = PrepareCache(state, session, snapshot, args.use_kv_cache, final_length, &must_wait);
  if (!ready.ok() || must_wait) {
    session.Restore(std::move(snapshot));
    if (!ready.ok()) return ready;
    return TurnStart{nullptr, /*wait_for_memory=*/true};
  }
  // Keep what the history and the new rendering share (the cache stays valid up to there); the turn
  // processes the rest, at least one id.
  const size_t common = std::min(CommonPrefix(session.tokens(), prompt_ids), prompt_ids.size() - 1);
  session.TruncateHistory(static_cast<int64_t>(common), snapshot);
  std::vector<int32_t> input(prompt_ids.begin() + static_cast<std::ptrdiff_t>(common), prompt_ids.end());
  std::erase_if(spliced.kept,
                [common](const sessions::SampledReply& reply) { return reply.end > static_cast<int64_t>(common); });

  // The tool choice's constraint, if any. Under auto it yields to the request's own constraint (the
  // reply then follows that), to stop strings (a constrained reply ends where its grammar does) and
  // to banned end-of-turn ids (a call could never end); calls are then parsed from the reply as
  // from free text.
  const bool auto_yields = automatic && (args.constraint != nullptr || !args.stop_strings.empty() ||
                                         EveryStopIdBanned(format.stop_ids(), args.sampling));
  ChatTurnArgs generation_args;
  const ChatTurnArgs* generate = &args;
  const bool tool_constrained = *tool_constraint != nullptr && !auto_yields;
  if (tool_constrained) {
    generation_args = args;
    generation_args.constraint = *tool_constraint;
    generate = &generation_args;
  }
  std::shared_ptr<StopStringRule> stop = MakeChatStopRule(state, args);
  GenerateOptions options = ChatGenerateOptions(state, *generate, format, stop);
  // A prompt that leaves the reasoning block open: the constraint's optional reasoning block has
  // begun (tool grammars and request constraints are compiled with the format's reasoning tags).
  // A prompt that closed the block itself: the constraint starts past an empty block, so the reply
  // cannot open a second one.
  if (options.constraint.grammar != nullptr && format.reasoning_tags()) {
    if (prompt.starts_in_reasoning) {
      options.constraint.matched_prefix = format.reasoning_tags()->open;
    } else if (prompt.reasoning_closed) {
      options.constraint.matched_prefix = format.reasoning_tags()->open + format.reasoning_tags()->close;
    }
  }
  std::shared_ptr<const ReplyToolParsing> parsing;
  if (conversation.tools != nullptr) {
    parsing = std::make_shared<const ReplyToolParsing>(
        ReplyToolParsing{*state.tool_call_family, conversation.tools,
                         args.tool_choice.mode != ToolChoice::Mode::kNone, std::make_shared<ToolCallIds>(messages)});
  }
  auto reply = std::make_shared<ChatReply>();
  const bool starts_in_reasoning = prompt.starts_in_reasoning;
  Turn::SessionCommit commit = [reply, stop, &state, starts_in_reasoning, messages, parsing, tools = conversation.tools,
                                kept = std::move(spliced.kept)](sessions::Session& s, const GenerateResult& result) {
    *reply = MakeChatReply(state, result, starts_in_reasoning, stop.get(), parsing.get());
    std::vector<text::ChatMessage> conversation = messages;
    conversation.push_back({text::Role::kAssistant, reply->answer, reply->reasoning, reply->tool_calls});
    s.SetMessages(std::move(conversation));
    std::vector<sessions::SampledReply> replies = kept;
    // A reply that ended on its stop id is remembered; one cut by max_new_tokens or a stop string is
    // not (the template ends it, the model did not).
    if (result.stop_reason == StopReason::kStopToken && s.length() > 0) {
      replies.push_back({s.messages().size() - 1, s.length(), {}});
    }
    s.SetSampledReplies(std::move(replies));
    s.SetTools(tools);
  };
  TurnCallbacks turn_callbacks =
      MakeChatTurnCallbacks(state, std::move(callbacks), starts_in_reasoning, reply, stop, parsing.get());
  return TurnStart{std::make_unique<Turn>(state, work, session, std::move(snapshot), std::move(input),
                                          std::move(options), std::move(turn_callbacks), std::move(commit),
                                          static_cast<int32_t>(*dropped))};
}

}  // namespace niels::daemon::engine
