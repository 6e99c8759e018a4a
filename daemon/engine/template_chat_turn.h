#pragma once
// StartTemplateChatTurn: a chat turn for a model with a Jinja chat template (docs/ARCHITECTURE.md,
// "Chat templates of the Llama family"). Engine thread only; StartChatTurn (chat_turn.h) calls it.
//
// The session keeps its conversation as messages (Session::messages: user, assistant and tool
// messages after the system prompt) and its tools. A turn cuts the conversation to keep_messages,
// appends its new messages (or the user's text as one), and renders the system prompt, the tools
// and the conversation with the generation prompt (ChatFormat::EncodeConversation); it reuses the
// session's KV cache for the
// longest common prefix of those ids with the cached ones: templates that write earlier turns
// differently once a new one follows (Qwen3 drops old reasoning) re-prefill only from the first
// difference, and a follow-up turn of a template that does not (Llama 3, Qwen2.5) prefills only its
// new tokens. The tokens a raw Generate appended to the session belong to no message: the next
// rendering leaves them out, so they are dropped from the history at the next turn.
//
// Sampled replies (sampled_replies.h): a reply the model ended on a stop id keeps the ids it sampled
// in the history where the template writes its message as it did when the message ended the
// conversation (ChatFormat::EncodeCompleted; the sampled ids then end on the template's end-of-turn
// id); where the template writes it otherwise, or exchanges were left out, the rendering stands
// from there. A spliced prompt that leaves no room for the reply falls back to the rendering.
//
// Context policy, as for the token-native format but in exchanges (a user message and everything
// up to the next one: the reply, its tool calls and their results, so a call and its result go
// together; the turn's new messages always stay): when the rendering plus the
// reply room R = min(max_new_tokens, T/4) exceeds T, the oldest exchanges are left
// out (the system prompt stays) until the rendering plus R fits T and the rendering is at most
// context_keep x T tokens, or no exchange is left; the outcome reports them as truncated_turns. An
// exchange holding a call that one of the turn's new tool messages answers is never left out, nor
// are those after it (a result never loses its call). The
// messages a session keeps are also bounded in bytes (kMaxConversationBytes): older exchanges go
// first. If the rendering without any exchange still leaves no room: INVALID_ARGUMENT.
//
// Tools (chat_tools.h): with tools and a template of a known tool-call family the reply's answer is
// parsed for calls (not with tool_choice none); the calls get ids unique in the session.
//
// On commit the new messages and the reply (its content, its reasoning as the message's
// reasoning_content, its tool calls) join the conversation and the tools are the session's; a
// cancelled or failed turn, or a template error (raise_exception: INVALID_ARGUMENT), leaves the
// session as it was. Errors besides StartChatTurn's: INVALID_ARGUMENT for keep_messages beyond the
// conversation, a tool result whose tool_call_id names no earlier call, a call id used twice, tools
// on a template without a tool-call family.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "daemon/engine/chat_turn.h"

namespace niels::daemon::engine {

// The bytes of message text (content and reasoning) a session's conversation keeps at most, the new
// user message included: the renderer's bound on its output (jinja::RenderLimits).
inline constexpr size_t kMaxConversationBytes = size_t{8} << 20;

// The context policy above, as a function of the rendering's length: `tokens_without(k)` is the
// length in ids of the turn rendered with the k oldest of `exchanges` exchanges left out (its
// errors are returned as they are). Leaves out `min_drop` (at least) when that rendering plus `room`
// fits `context`; otherwise the fewest k > min_drop whose rendering plus `room` fits and is at
// most keep x context ids (keep clamped to [0, 1], NaN as 0), found by a binary search that
// assumes leaving out more never lengthens the rendering, or all `exchanges` when none qualifies.
// Asks `tokens_without` at most 2 + ceil(log2(exchanges - min_drop + 1)) times.
// INVALID_ARGUMENT when the chosen rendering is `context` ids or longer (no room for a reply).
common::StatusOr<size_t> ExchangesToDrop(const std::function<common::StatusOr<int64_t>(size_t drop)>& tokens_without,
                                         size_t exchanges, size_t min_drop, int64_t room, int64_t context,
                                         double keep);

// Chat with append_only on a conversation session (AppendChatMessages), rendered by `format`
// (EngineState::conversation_format()).
common::StatusOr<const sessions::Session*> AppendTemplateMessages(EngineState& state, const Work& work,
                                                                  const ChatTurnArgs& args,
                                                                  const text::ChatFormat& format);

// A turn rendered by `format`: the model's template (kind kTemplate), or for a niels_gpt session
// in conversation mode (chat_turn.h) the token-native format rendering the whole conversation
// through the generic tool format. Errors as StartChatTurn.
TurnResult StartTemplateChatTurn(EngineState& state, const Work& work, const ChatTurnArgs& args,
                                 ChatCallbacks callbacks, const text::ChatFormat& format);

}  // namespace niels::daemon::engine
