#pragma once
// ToolCallParser: a reply's answer text split, as it arrives, into content and the tool calls the
// model made, one parser per model family behind one interface (docs/ARCHITECTURE.md, "Layout").
// The engine feeds it the answer text of chat replies on sessions with tools (engine/chat_tools.h).
//
// What it is given: the family, the names of the tools the request knows, whether calls are
// allowed at all, and then the reply's answer text (what ReplySplitter hands out as the answer:
// reasoning is split off before and is no concern of this parser), piece by piece, as decoded.
// Special tokens that open a call (Llama's <|python_tag|>) must be in that text as their text.
//
// What it returns per Feed(): a Delta -- content that is certainly not part of a call (safe to
// stream now) and the calls completed by this piece. Finish() flushes what was held back and gives
// the final reply: the content and the list of calls, without ids (the daemon assigns them).
//
// The families (what a call looks like; everything else is content):
//   kHermes (Qwen3, Qwen2.5): anywhere in the reply, `<tool_call>`, optional JSON whitespace, one
//     JSON object {"name": <string>, "arguments": <object>} (exactly these two keys), optional
//     whitespace, `</tool_call>`. Any number of calls; the text before, between and after them is
//     content, byte for byte (the "\n" Qwen writes between two calls included). The tags belong to
//     the call.
//   kLlama3Json (Llama 3.1, 3.2, 3.3 with their JSON tool prompt): the trigger is the start of the
//     reply. A reply whose first character after JSON whitespace is `{`, or whose first characters
//     after whitespace are `<|python_tag|>` (then optional whitespace and `{`), is a call attempt:
//     one JSON object {"name": <string>, "parameters": <object>} ("arguments" is accepted instead
//     of "parameters", not both; an optional "type": "function" as Meta's tool_utils shows). After
//     a call, whitespace is content, and another call may follow, directly or after a `;` (the
//     separator vLLM's llama3_json parser accepts; Meta's template renders one call per message and
//     documents no separator). The `;` and the whitespace after it belong to the call that follows. Any other character
//     after a call, and everything after it, is content; a reply whose first character is neither
//     is all content (no call can start later).
//   kGenericJson (templates without tool support; the daemon describes the tools in the system
//     message and asks for this shape): as kLlama3Json's start, a reply whose first character after
//     whitespace is `{` is an attempt at one object {"tool_calls": [<call>, ...]} with at least one
//     <call> = {"name": <string>, "arguments": <object>}; any other reply is the answer, all of it
//     content. Text after the object is content.
//
// Validity: a call counts only if its JSON parses (common/bounded_json.h: ParseJsonBounded, so
// nesting is bounded), has exactly the keys above, written without escapes and without repeats, and
// its name is one of the request's tool names. Anything else -- an unterminated call, invalid JSON,
// other keys, arguments that are not an object, an unknown tool name (nielsd constrains the names a
// model may write, so a name it does not know is text, not a call; vLLM would return it as a call),
// a call longer than max_call_bytes -- is content: every byte of it, in place. Nothing the model
// wrote is dropped except the syntax of calls that did count (tags, the `;`, the call's JSON).
//
// A failed attempt: its text up to the byte that decided the failure is content. For kHermes the
// byte that broke the syntax is read again as text (it may open the next call), together with the
// start of a closing tag before it (`{...}<tool_call>`: a model that forgot `</tool_call>` opens
// the next call); the closing brace of an object that did not validate stays in the failed text. For kLlama3Json and kGenericJson the
// rest of the reply is content.
//
// Arguments: the "arguments" (or "parameters") value's JSON text exactly as the model wrote it
// (whitespace, key order and number spelling kept), not re-serialized.
//
// Streaming: a call is handed out whole, in the Delta of the piece that completed it (its closing
// tag for kHermes, the closing brace of its object otherwise): one ToolCallDelta with the name and
// the whole arguments. A call is validated only when complete, and a call whose name or first
// argument bytes had already gone out could still fail (cut off, too long, invalid further on),
// which a stream cannot take back; holding a call until it validates keeps every invariant below
// exact. The Delta's shape (name, then argument fragments) allows streaming fragments later, once
// the engine constrains a call by its grammar so that a call cannot fail after its name.
//
// Invariants (tests/daemon/tool_calls, tests/fuzz/tool_calls_fuzz.cc):
//   - the content pieces of all Deltas (Feed's and Finish's) joined equal the final content;
//   - per call index, the argument fragments joined equal that call's final arguments;
//   - the result does not depend on how the text is cut into pieces (1-byte pieces included);
//   - a reply with no call has content equal to the whole text fed;
//   - held back (neither content nor call yet): at most the length of the family's trigger minus
//     one while no call attempt is open, and at most max_call_bytes during an attempt;
//   - work per fed byte is amortized O(1): work_units() counts every byte step of the state
//     machine, every fallback step of the trigger matcher, and the bytes each completed attempt is
//     parsed and walked over (each a linear pass over at most max_call_bytes), at most
//     kMaxWorkUnitsPerByte per byte fed.
// Not thread-safe; one parser per reply.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace niels::daemon::tool_calls {

enum class ToolCallFamily {
  kHermes,       // Qwen3, Qwen2.5: <tool_call>{"name", "arguments"}</tool_call>
  kLlama3Json,   // Llama 3.1-3.3: [<|python_tag|>]{"name", "parameters"}[; ...]
  kGenericJson,  // templates without tool support: {"tool_calls": [{"name", "arguments"}, ...]}
};

// The family's name as Info would show it: "hermes", "llama3_json", "generic_json".
std::string_view ToolCallFamilyName(ToolCallFamily family);

// The longest call attempt held back by default: 256 KiB of text from the first byte of its
// trigger (the `;` before a Llama call, the `<` of <tool_call>, the `{`) to its last byte. Past it,
// the attempt is content.
inline constexpr size_t kDefaultMaxCallBytes = 256 * 1024;

// The bound on work_units() per byte fed (see the invariants above): 1 state-machine step, 1
// trigger fallback, up to 1 re-read of a byte after a failed attempt, and a completed attempt's
// bytes parsed once and walked at most three times (the generic shape nests calls two levels deep).
inline constexpr uint64_t kMaxWorkUnitsPerByte = 8;

struct ToolCallParserOptions {
  // The tools the request knows. A call to any other name is content. Empty: every call is content.
  std::vector<std::string> tool_names;
  // False (tool_choice none): no call is looked for; all text is content, nothing is held back.
  bool calls_allowed = true;
  // The longest call attempt, in bytes (see kDefaultMaxCallBytes). At least 1.
  size_t max_call_bytes = kDefaultMaxCallBytes;
};

// A piece of one call. `index` counts the reply's calls from 0. `name` is set in the first piece of
// a call and empty in later ones; `arguments` is a fragment of the arguments' JSON text.
struct ToolCallDelta {
  size_t index = 0;
  std::string name;
  std::string arguments;
};

// What one Feed() (or Finish()) hands out.
struct Delta {
  std::string content;               // text that is not part of any call, in order
  std::vector<ToolCallDelta> calls;  // in index order
};

// One parsed call: the tool's name and its arguments' JSON text (an object, as written).
struct ToolCall {
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

// The reply when it ended.
struct FinalReply {
  Delta last;                   // what Finish() released (the stream's last pieces)
  std::string content;          // all content: every Delta's content joined
  std::vector<ToolCall> calls;  // every call, in index order
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;

  // Appends `text` to the reply and returns what is decided now.
  virtual Delta Feed(std::string_view text) = 0;
  // The reply ended: an attempt still open (an unterminated call, a trigger prefix) is content.
  // Call once, after the last Feed(); the parser accepts nothing afterwards.
  virtual FinalReply Finish() = 0;

  // Bytes fed but neither content nor part of a call yet (see the bound above).
  virtual size_t held_back_bytes() const = 0;
  // The work done so far, in the units described above.
  virtual uint64_t work_units() const = 0;
};

// A parser for one reply of `family`.
std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolCallFamily family, ToolCallParserOptions options);

// Feed(text) + Finish() in one call: the whole reply at once.
FinalReply ParseToolCalls(ToolCallFamily family, const ToolCallParserOptions& options, std::string_view text);

}  // namespace niels::daemon::tool_calls
