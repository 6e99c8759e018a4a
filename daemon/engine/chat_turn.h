#pragma once
// StartChatTurn: one user/assistant turn on a session, in the model's chat format
// (text/chat_format.h; docs/ARCHITECTURE.md, "Sessions and the KV cache" and "Chat templates of the
// Llama family"). Engine thread only.
//
// Token-native format (niels_gpt): the turn appends [usr] text [eot] [asst] to the history and the
// reply after it. Context policy: a turn needs its own tokens plus room for the reply,
// R = min(max_new_tokens, T/4) tokens (at least 1). When history + turn + R > T the oldest complete
// turns are dropped (the system prompt stays, with its cached keys/values; the rest is
// re-prefilled) down to the low-water mark: until history + turn <= EngineOptions::context_keep x T
// (and history + turn + R <= T) or no turn is left, so that the re-prefill is paid once every
// several turns rather than every turn; the outcome reports truncated_turns. If even then the
// history plus the turn leaves no room for a single reply token: INVALID_ARGUMENT and the session is
// unchanged. A reply that ends without eot (max_new_tokens) still closes its turn with an eot in the
// history (uncached), so the history always reads [asst] reply [eot]; at the context limit the eot
// is added at the start of the next turn instead.
//
// Template format (a Jinja chat template): template_chat_turn.h.
//
// Conversation mode of a niels_gpt session: a session with tools (its own, or set by this turn)
// keeps its conversation as messages like a template session, and its turns go through
// template_chat_turn.h rendered by EngineState::conversation_format() (the token-native format
// rendering the whole conversation, through the generic tool format: text/generic_tool_format.h);
// it stays in that mode once it has messages. A session that already holds token-native turns
// takes no tools (INVALID_ARGUMENT naming tools): it would need its history rewritten.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/chat_tools.h"
#include "daemon/engine/stop_string_rule.h"
#include "daemon/engine/turn.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/sampling/sampler.h"
#include "daemon/text/chat_format.h"

namespace niels::daemon::engine {

struct ChatTurnArgs {
  std::string session_id;
  // The user's new message; "" when `messages` are given. REQUIRES: one of the two, not both.
  std::string user_text;
  // Conversations as messages: first the conversation is cut back to its first keep_messages
  // messages after the system prompt (token-native: whole turns, an even count), then `messages`
  // are appended (roles user, assistant, tool; a tool message's tool_call_id names a call of the
  // conversation), then the model replies, unless append_only.
  std::optional<size_t> keep_messages;
  std::vector<text::ChatMessage> messages;
  bool append_only = false;
  // Set: the session's tools from this turn on (null: none); unset: the session keeps its own.
  std::optional<std::shared_ptr<const std::vector<text::ToolDefinition>>> tools;
  ToolChoice tool_choice;
  int32_t max_new_tokens = 0;       // REQUIRES: >= 1
  bool use_kv_cache = true;
  sampling::SamplingParams sampling;   // REQUIRES: valid for the model's vocabulary
  text::ChatOptions options;        // enable_thinking (template formats)
  bool want_logprobs = false;       // each StepEvent carries its logprob (generator.h)
  int32_t top_logprobs = 0;         // and this many best alternatives
  int32_t sampled_top_logprobs = 0; // and this many of the distribution drawn from
  // Structured output: the reply follows this grammar (output_constraint.h); null = free text.
  // REQUIRES with one: EngineState::constraint_vocabulary set, the chat format's stop ids not banned.
  std::shared_ptr<const grammar::CompiledGrammar> constraint;
  // The reply ends before the first of these (stop_string_rule.h): its text is the text before the
  // match, the session keeps the reply's ids wholly before it and closes the turn as a reply cut by
  // max_new_tokens is. REQUIRES: none empty; not with a constraint.
  std::vector<std::string> stop_strings;
};

// A committed reply: its ids (the stop id that ended it not included) and its text split into the
// answer and the reasoning (text/reply_splitter.h); the stop string that ended it, if one did.
// With tools, `answer` is the content beside the calls the reply made, `tool_calls` those calls
// (chat_tools.h).
struct ChatReply {
  std::vector<int32_t> ids;
  std::string answer;
  std::string reasoning;
  std::string stop_string;
  std::vector<text::ToolCall> tool_calls;
};

// How a chat turn talks to whoever started it (daemon/handlers). Both run on the engine thread.
struct ChatCallbacks {
  // Every sampled id with the text it adds to the reply's answer and reasoning (the concatenation
  // of the deltas is the committed reply's answer and reasoning) and the pieces of the tool calls
  // it completed (per index joined: the committed calls). May be empty. To stop the turn set the
  // request's cancel flag.
  std::function<void(const StepEvent& event, const text::ReplyDelta& delta, std::span<const ToolCallPiece> calls)>
      on_token;
  // The turn committed (the session holds it): answer the request.
  std::function<void(const TurnOutcome& outcome, const ChatReply& reply)> on_commit;
};

// Starts the turn in which the user says args.user_text and the model replies (stopping at the chat
// format's stop ids). Errors: INVALID_ARGUMENT when the model has no chat format (the reason it was
// refused at start) or the template refuses the conversation (the session unchanged); NOT_FOUND /
// PERMISSION_DENIED for the session (SessionRegistry::Find), INVALID_ARGUMENT when the turn cannot
// fit (above), RESOURCE_EXHAUSTED when its KV need alone exceeds the budget or a renderer limit is
// passed; wait_for_memory when running turns hold that memory.
TurnResult StartChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args, ChatCallbacks callbacks);

// --- shared by the two formats' turns (chat_turn.cc, template_chat_turn.cc) ---

// The generation of a chat reply: the request's sampling, max_new_tokens and cache choice, the
// format's stop ids, and the constraint, if any (on a reasoning model the handlers compiled it to
// follow an optional reasoning block: handlers/chat.cc).
// With stop strings, `stop` is the rule the options carry (MakeChatStopRule).
GenerateOptions ChatGenerateOptions(const EngineState& state, const ChatTurnArgs& args, const text::ChatFormat& format,
                                    std::shared_ptr<StopStringRule> stop);

// The rule for args.stop_strings; null when there are none.
std::shared_ptr<StopStringRule> MakeChatStopRule(const EngineState& state, const ChatTurnArgs& args);

// Tokens kept free for the reply when fitting a chat turn into the context.
int64_t ChatReplyRoom(int32_t max_new_tokens, int64_t context);

// The reply a generation committed, in `format`: ids without the stop id that ended it, decoded and
// split (starts_in_reasoning: the prompt left a reasoning block open); after a stop string, the text
// before it (stop: the turn's rule, or null).
// How a reply's answer is parsed for tool calls (chat_tools.h): the family, the tools, whether
// calls are allowed (tool_choice none: no), and the ids the stream and the commit share.
struct ReplyToolParsing {
  tool_calls::ToolCallFamily family = tool_calls::ToolCallFamily::kHermes;
  std::shared_ptr<const std::vector<text::ToolDefinition>> tools;  // not null
  bool calls_allowed = true;
  std::shared_ptr<ToolCallIds> ids;
};

// With `tools` (null: none), the answer is split into content and calls.
ChatReply MakeChatReply(const EngineState& state, const GenerateResult& result, bool starts_in_reasoning,
                        const StopStringRule* stop, const ReplyToolParsing* tools);

// The Turn's callbacks for `callbacks`: on_token decodes and splits the reply's text as it grows
// (with a stop rule, the text it lets a stream show: never past a possible match); on_commit hands
// over *reply, which the turn's SessionCommit fills (MakeChatReply) before.
// With `tools` (null: none) the streamed answer goes through the reply's tool-call parser.
TurnCallbacks MakeChatTurnCallbacks(const EngineState& state, ChatCallbacks callbacks, bool starts_in_reasoning,
                                    std::shared_ptr<const ChatReply> reply, std::shared_ptr<StopStringRule> stop,
                                    const ReplyToolParsing* tools);

// Chat with append_only: the conversation cut to keep_messages and `messages` appended (and the
// tools set), validated as a turn's, stored; nothing generated. Errors as StartChatTurn. The
// session's tokens stay: the next turn reuses what its rendering shares with them.
common::StatusOr<const sessions::Session*> AppendChatMessages(EngineState& state, const Work& work,
                                                              const ChatTurnArgs& args);

}  // namespace niels::daemon::engine
