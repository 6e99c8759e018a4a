#pragma once
// JinjaChatFormat: a model's own Jinja chat template (tokenizer_config.json "chat_template", GGUF
// tokenizer.chat_template) behind the ChatFormat interface (docs/ARCHITECTURE.md, "Chat templates
// of the Llama family").
//
// A turn renders the whole conversation the way transformers' apply_chat_template does (messages
// with role and content, an assistant message's reasoning as reasoning_content and its calls as
// tool_calls [{"id", "type": "function", "function": {"name", "arguments": the parsed JSON}}], a
// tool message's tool_call_id and name, `tools` as ChatOptions.tools describes (None without),
// add_generation_prompt = true, bos_token/eos_token, enable_thinking when the request sets it) and
// encodes the text with the template's special-token literals parsed (Tokenizer::EncodeRendered).
// Message contents are plain text, and so are the strings of tool calls and tool definitions (the
// keys of their JSON included): a special-token literal a content types (<|im_end|>, found with
// Tokenizer::FindSpecialLiterals) is replaced by a private-use marker (a code point the template's
// source does not write, with the literal's index) while the template renders, then put back and
// encoded as text with what surrounds it (Tokenizer::EncodeRenderedKeepingText); the rendered text
// is exactly the template's rendering of the real contents, and with no such literal the ids are
// exactly EncodeRendered's. So a user or a tool result that types `<|im_end|><|im_start|>system`
// writes those characters, not a new turn (transformers and llama.cpp's server would read the
// turn). A literal that only the template's own text completes across a content's edge is not
// marked (no real template writes such text next to a content). When the
// tokenizer prepends a BOS id (add_bos_id) and the rendering does not already start with it, the
// BOS id is put in front once: transformers' tokenize=True encodes the rendered text as it is, and
// llama.cpp strips a leading BOS text and then adds the BOS id, so both end with exactly one BOS.
//
// What the template means is read once, at Create, from renderings of probe conversations:
//   - the end-of-turn id: the first special id the template writes after an assistant message's
//     content (<|im_end|>, <|eot_id|>); the stop ids are it, then the model's own;
//   - the banned ids: every other special id of a rendered conversation (role markers such as
//     <|im_start|>, <|start_header_id|>, the BOS);
//   - reasoning: a template that mentions "</think>" reasons in <think>...</think> blocks.
//
// A call's arguments and a tool's parameters are JSON text, parsed as Python's json.loads would
// (text that does not parse is given to the template as a string); INVALID_ARGUMENT naming the
// message and call (or the tool) when that JSON nests deeper than kMaxToolJsonDepth or holds an
// integer beyond 64 bits or a float beyond a double (json.loads would keep the integer exact and
// read the float as infinity, which a template value here cannot).
//
// Bounds: the template was parsed once with ParseOptions' limits; every render is bounded by
// `limits` (output size, loop iterations, work), so a hostile template or a huge conversation ends
// in RESOURCE_EXHAUSTED, never in unbounded time or memory. Immutable; any thread.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "daemon/text/chat_format.h"
#include "daemon/text/jinja/template.h"

namespace niels::daemon::text {

// The deepest nesting of a tool call's arguments or a tool's parameters (inside the template's
// context, whose own depth limit is 64).
inline constexpr int kMaxToolJsonDepth = 48;

struct JinjaChatFormatOptions {
  jinja::RenderLimits limits;  // of every render (jinja/render_limits.h has the defaults)
  // What strftime_now() formats (Llama 3.2's date line). Empty: the current time at each render.
  std::function<std::chrono::system_clock::time_point()> now;
};

class JinjaChatFormat final : public ChatFormat {
 public:
  // REQUIRES: source.tokenizer set and source.chat_template not empty. INVALID_ARGUMENT naming the
  // template error when it does not parse or cannot render a simple conversation.
  static common::StatusOr<std::unique_ptr<JinjaChatFormat>> Create(const ChatFormatSource& source,
                                                                   JinjaChatFormatOptions options = {});

  Kind kind() const override { return Kind::kTemplate; }
  std::string_view name() const override { return "jinja"; }
  common::StatusOr<std::vector<int32_t>> SessionStart(const std::optional<std::string>& system_prompt) const override;
  common::StatusOr<ChatPrompt> EncodeTurn(const std::optional<std::string>& system_prompt,
                                          std::span<const ChatMessage> conversation, std::string_view user_text,
                                          const ChatOptions& options) const override;
  common::StatusOr<ChatPrompt> EncodeConversation(const std::optional<std::string>& system_prompt,
                                                  std::span<const ChatMessage> conversation,
                                                  const ChatOptions& options) const override;
  common::StatusOr<std::vector<int32_t>> EncodeCompleted(const std::optional<std::string>& system_prompt,
                                                         std::span<const ChatMessage> conversation,
                                                         const ChatOptions& options) const override;
  const std::vector<int32_t>& stop_ids() const override { return stop_ids_; }
  const std::vector<int32_t>& banned_ids() const override { return banned_ids_; }
  const std::optional<ReasoningTags>& reasoning_tags() const override { return reasoning_tags_; }

  // The rendered text of a conversation (system prompt, `conversation`, then `user_text` as a user
  // message when set), as EncodeTurn renders it. Errors as EncodeTurn.
  common::StatusOr<std::string> Render(const std::optional<std::string>& system_prompt,
                                       std::span<const ChatMessage> conversation,
                                       const std::optional<std::string_view>& user_text, bool add_generation_prompt,
                                       const ChatOptions& options) const;
  // The prompt of a conversation that ends with its last message (a tool's result, say) instead of
  // a new user text: `conversation` rendered after the system prompt, with the generation prompt
  // when add_generation_prompt, encoded as EncodeTurn encodes (the contents' literals kept as
  // text). Errors as EncodeTurn.
  common::StatusOr<ChatPrompt> EncodeConversation(const std::optional<std::string>& system_prompt,
                                                  std::span<const ChatMessage> conversation,
                                                  bool add_generation_prompt, const ChatOptions& options) const;
  // `rendered` encoded as a prompt (special literals parsed, the BOS rule above).
  common::StatusOr<std::vector<int32_t>> Encode(std::string_view rendered) const;

 private:
  // A rendering with the contents' special-token literals put back: `plain` are their ranges.
  struct MarkedRendering {
    std::string text;
    std::vector<TextRange> plain;
  };
  // `content` with each special-token literal replaced by marker_, its index in *literals (where
  // it is appended) and ';', and each marker_ of its own by marker_ '_'.
  std::string MarkContent(std::string_view content, std::vector<std::string>* literals) const;
  // MarkContent applied to every string (keys included) of a JSON value: tool definitions and
  // call arguments, which templates print with tojson.
  nlohmann::ordered_json MarkJson(const nlohmann::ordered_json& value, std::vector<std::string>* literals) const;
  // The template's output with the marks of MarkContent resolved.
  MarkedRendering Unmark(std::string_view rendered, const std::vector<std::string>& literals) const;
  common::StatusOr<MarkedRendering> RenderMarked(const std::optional<std::string>& system_prompt,
                                                 std::span<const ChatMessage> conversation,
                                                 const std::optional<std::string_view>& user_text,
                                                 bool add_generation_prompt, const ChatOptions& options) const;
  // RenderMarked, then encoded with the contents' literals kept as text.
  common::StatusOr<ChatPrompt> EncodeMarked(const std::optional<std::string>& system_prompt,
                                            std::span<const ChatMessage> conversation,
                                            const std::optional<std::string_view>& user_text,
                                            bool add_generation_prompt, const ChatOptions& options) const;
  // Encode with the literals in `plain` kept as text.
  common::StatusOr<std::vector<int32_t>> EncodeKeepingText(std::string_view rendered,
                                                           std::span<const TextRange> plain) const;

  JinjaChatFormat(const ChatFormatSource& source, jinja::Template chat_template, JinjaChatFormatOptions options);
  // Reads the end-of-turn id, the banned ids and the reasoning tags from probe renderings.
  common::Status Probe(const ChatFormatSource& source);

  const Tokenizer& tokenizer_;
  jinja::Template template_;
  JinjaChatFormatOptions options_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  std::optional<int32_t> add_bos_id_;
  std::string marker_;  // the private-use character MarkContent marks with
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> banned_ids_;
  std::optional<ReasoningTags> reasoning_tags_;
};

}  // namespace niels::daemon::text
