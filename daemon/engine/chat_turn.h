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

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/engine/stop_string_rule.h"
#include "daemon/engine/turn.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/sampling/sampler.h"
#include "daemon/text/chat_format.h"

namespace niels::daemon::engine {

struct ChatTurnArgs {
  std::string session_id;
  std::string user_text;            // REQUIRES: not empty
  int32_t max_new_tokens = 0;       // REQUIRES: >= 1
  bool use_kv_cache = true;
  sampling::SamplingParams sampling;   // REQUIRES: valid for the model's vocabulary
  text::ChatOptions options;        // enable_thinking (template formats)
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
struct ChatReply {
  std::vector<int32_t> ids;
  std::string answer;
  std::string reasoning;
  std::string stop_string;
};

// How a chat turn talks to whoever started it (daemon/handlers). Both run on the engine thread.
struct ChatCallbacks {
  // Every sampled id with the text it adds to the reply's answer and reasoning (the concatenation
  // of the deltas is the committed reply's answer and reasoning). May be empty. To stop the turn set
  // the request's cancel flag.
  std::function<void(const StepEvent& event, const text::ReplyDelta& delta)> on_token;
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
// format's stop ids, and the constraint, if any. A constraint covers the whole reply, a reasoning
// model's reasoning included (ask it not to think: ChatOptions::enable_thinking false).
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
ChatReply MakeChatReply(const EngineState& state, const GenerateResult& result, bool starts_in_reasoning,
                        const StopStringRule* stop);

// The Turn's callbacks for `callbacks`: on_token decodes and splits the reply's text as it grows
// (with a stop rule, the text it lets a stream show: never past a possible match); on_commit hands
// over *reply, which the turn's SessionCommit fills (MakeChatReply) before.
TurnCallbacks MakeChatTurnCallbacks(const EngineState& state, ChatCallbacks callbacks, bool starts_in_reasoning,
                                    std::shared_ptr<const ChatReply> reply, std::shared_ptr<StopStringRule> stop);

}  // namespace niels::daemon::engine
