#pragma once
// ChatFormat: how a model's conversations become token ids, the one interface the engine uses for
// chat (docs/ARCHITECTURE.md, "Chat templates of the Llama family"). Two kinds:
//   - kTokenNative (niels_gpt, native_chat_format.h): a session's history only grows; a turn
//     appends [usr] text [eot] [asst] (chat_template.h) and the reply's sampled ids stay as they
//     were sampled.
//   - kTemplate (a model's Jinja chat template, jinja_chat_format.h): a session keeps its
//     conversation as messages, and every turn renders the whole conversation again and encodes it;
//     the engine reuses the KV cache for the longest common prefix of the new ids with the cached
//     ones.
// Both give the ids that end a reply (stop ids), the ids banned while a reply is sampled, and how
// a reply's text splits into reasoning and answer.
//
// Threading: immutable once made; every method is safe from any thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/text/chat_template.h"
#include "daemon/text/reply_splitter.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

// A call an assistant message made: the id the daemon gave it, the tool's name, and its arguments
// (the text of a JSON object, as the model wrote it or the client sent it).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

// A tool the model may call, in the shape of the OpenAI API's function tools: its name, what it
// does ("" = not given), and its parameters (the text of a JSON Schema object; "" = not given).
struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters;
  bool operator==(const ToolDefinition&) const = default;
};

// One message of a session's conversation after its system prompt (kTemplate formats).
struct ChatMessage {
  Role role = Role::kUser;
  std::string content;
  std::string reasoning;  // an assistant reply's reasoning (its think block), "" when none
  std::vector<ToolCall> tool_calls = {};  // kAssistant: the calls it made, in order
  std::string tool_call_id = {};          // kTool: the id of the call this is the result of
  std::string name = {};                  // kTool: the name of that call's tool ("" = not given)
  bool operator==(const ChatMessage&) const = default;
};

// "system", "user", "assistant", "tool" (what templates see as message.role).
std::string_view RoleName(Role role);

// Per-turn options of a chat request.
struct ChatOptions {
  // Qwen3's template variable; unset leaves it undefined (the template's default). Ignored by
  // templates that do not read it and by the token-native format.
  std::optional<bool> enable_thinking;
  // The tools the template is given (its `tools` variable, a list of {"type": "function",
  // "function": {name, description, parameters}} as transformers passes them); null or empty: none
  // (`tools` is None).
  std::shared_ptr<const std::vector<ToolDefinition>> tools;
};

// The ids of a chat turn.
struct ChatPrompt {
  // kTokenNative: what the turn appends to the history. kTemplate: the whole conversation.
  std::vector<int32_t> ids;
  // The prompt ends inside an open reasoning block: the reply starts with reasoning.
  bool starts_in_reasoning = false;
  // The prompt ends just after a reasoning block it closed itself (only whitespace after the close
  // tag; Qwen3 with enable_thinking false writes an empty one): the reply is the answer.
  bool reasoning_closed = false;
};

class ChatFormat {
 public:
  enum class Kind { kTokenNative, kTemplate };

  virtual ~ChatFormat() = default;

  virtual Kind kind() const = 0;
  // "niels" or "jinja" (InfoResponse.chat_format).
  virtual std::string_view name() const = 0;

  // The ids every conversation of a session with `system_prompt` (nullopt: none) starts with, so
  // that CreateSession can prefill a system prompt once (it asks only with one: a session without
  // one starts empty). kTokenNative: [sys] text [eot] (nothing without a system prompt). kTemplate: the longest common prefix of two renderings that differ only in the
  // user's text (the system prompt and whatever the template puts before the first user message),
  // cut back to its last special id (text before the user's message may merge with it).
  // Errors: INVALID_ARGUMENT when the template refuses the conversation (naming why) or the text
  // cannot be encoded; RESOURCE_EXHAUSTED past a renderer limit.
  virtual common::StatusOr<std::vector<int32_t>> SessionStart(const std::optional<std::string>& system_prompt) const = 0;

  // The ids of a turn in which the user says `user_text`. kTokenNative: [usr] text [eot] [asst]
  // (system_prompt and conversation are not used: the history holds them). kTemplate: the system
  // prompt, `conversation` and the user's message rendered with the generation prompt, then
  // encoded (the template's special-token literals parsed, the contents' kept as text; the BOS id
  // added once when the tokenizer adds one and the rendering does not start with it). Errors as
  // SessionStart.
  virtual common::StatusOr<ChatPrompt> EncodeTurn(const std::optional<std::string>& system_prompt,
                                                  std::span<const ChatMessage> conversation,
                                                  std::string_view user_text, const ChatOptions& options) const = 0;

  // The ids of a turn that replies to `conversation` as it is (its last message a user or tool
  // message, or none). kTokenNative: the system prompt as [sys] text [eot] when given, each message
  // as [usr] text [eot] or [asst] text [eot], then [asst] (a tool message, a tool call or tools:
  // INVALID_ARGUMENT, the format has no marker for them; the generic tool format rewrites them). kTemplate: the system prompt and
  // `conversation` rendered with the generation prompt, then encoded as EncodeTurn does. Errors as
  // EncodeTurn.
  virtual common::StatusOr<ChatPrompt> EncodeConversation(const std::optional<std::string>& system_prompt,
                                                          std::span<const ChatMessage> conversation,
                                                          const ChatOptions& options) const = 0;

  // The ids of `conversation` rendered with its last message complete (no generation prompt),
  // encoded as EncodeConversation encodes: what a turn compares the ids sampled for a reply with
  // (engine/sampled_replies.h). The default, and kTokenNative: UNIMPLEMENTED (such a format's
  // replies are rendered its own way at every turn).
  virtual common::StatusOr<std::vector<int32_t>> EncodeCompleted(const std::optional<std::string>& system_prompt,
                                                                 std::span<const ChatMessage> conversation,
                                                                 const ChatOptions& options) const;

  // The ids that end a reply, the format's own end of turn first (a reply that must end, under a
  // constraint, ends on the first one not banned). Never empty.
  virtual const std::vector<int32_t>& stop_ids() const = 0;
  // The ids never sampled in a reply unless the request allows special tokens (role markers).
  virtual const std::vector<int32_t>& banned_ids() const = 0;
  // The markers of a reply's reasoning; nullopt when the model's replies carry none.
  virtual const std::optional<ReasoningTags>& reasoning_tags() const = 0;
};

// What a ChatFormat is made from: the pieces of a loaded model (loaders::Model), which must
// outlive the format.
struct ChatFormatSource {
  const Tokenizer* tokenizer = nullptr;
  SpecialTokens special;               // niels_gpt's markers (all -1 when none)
  std::vector<int32_t> stop_ids;       // the model's own stop ids
  std::string chat_template;           // Jinja source; "" = none
  std::string bos_token;               // the template's bos_token / eos_token ("" = undefined)
  std::string eos_token;
  std::optional<int32_t> add_bos_id;   // the BOS the tokenizer prepends to a prompt
};

// The model's chat format: its Jinja template when it has one, else niels_gpt's token-native
// template when the tokenizer has its four markers. INVALID_ARGUMENT when the model has neither
// (a base model: use Generate), or when its template does not parse or cannot render a simple
// conversation (the message names the template error).
common::StatusOr<std::unique_ptr<ChatFormat>> MakeChatFormat(const ChatFormatSource& source);

}  // namespace niels::daemon::text
