#pragma once
// ReplySplitter: a chat reply's text split into its reasoning and its answer, as the text arrives
// (docs/ARCHITECTURE.md, "Chat templates of the Llama family"). Models that reason first (Qwen3,
// DeepSeek R1) write `<think>` reasoning `</think>` answer; nielsd hands the two out apart (Chat's
// `reasoning` and `reply`) and keeps the reasoning as the assistant message's reasoning_content, so
// that the template decides whether a later turn sees it.
//
// The rules (those of Qwen3's template reading a reply back, made incremental):
//   - Without tags (a model that does not reason, niels_gpt) everything is answer.
//   - A reply that opens with the open tag (after optional whitespace) reasons until the close tag;
//     a reply whose prompt left the open tag unclosed (starts_in_reasoning) reasons from its first
//     byte. The tags themselves belong to neither part.
//   - Newlines right after the open tag and right before the close tag are dropped from the
//     reasoning, newlines right after the close tag from the answer (lstrip/rstrip('\n')).
//   - Everything after the close tag is answer, tags included; text that does not open with the
//     open tag is all answer.
//   - A reply cut inside the reasoning (max_new_tokens, the context) has only reasoning; its
//     trailing newlines are dropped.
// The split does not depend on how the text is cut into pieces: the concatenation of what Add()
// and Finish() return is Split() of the whole text, whatever the pieces (text that might still be
// the start of a tag, or newlines that might still precede the close tag, are held back).
// Not thread-safe.

#include <optional>
#include <string>
#include <string_view>

namespace niels::daemon::text {

// The markers around a reply's reasoning.
struct ReasoningTags {
  std::string open = "<think>";
  std::string close = "</think>";
};

// Text added to the two parts of a reply.
struct ReplyDelta {
  std::string answer;
  std::string reasoning;
};

class ReplySplitter {
 public:
  // `tags`: nullopt = the model does not reason (everything is answer). `starts_in_reasoning`: the
  // prompt ended inside an open reasoning block.
  explicit ReplySplitter(std::optional<ReasoningTags> tags = std::nullopt, bool starts_in_reasoning = false);

  // Appends `text` and returns what can be handed out now.
  ReplyDelta Add(std::string_view text);
  // The reply ended: returns whatever was held back. Call once, after the last Add().
  ReplyDelta Finish();

  // Add(text) + Finish() in one call: the whole reply split.
  static ReplyDelta Split(std::string_view text, const std::optional<ReasoningTags>& tags, bool starts_in_reasoning);

 private:
  enum class State { kStart, kReasoningStart, kReasoning, kAnswerStart, kAnswer };

  // Moves as much of pending_ into `out` as is decided; leaves the undecided rest in pending_.
  void Drain(ReplyDelta& out);
  // kStart: decides whether the reply opens with the open tag. False when it cannot tell yet.
  bool DrainStart();
  // kReasoning: hands out reasoning up to the close tag, holding back what may precede it.
  bool DrainReasoning(ReplyDelta& out);

  std::optional<ReasoningTags> tags_;
  State state_;
  std::string pending_;  // received, not yet handed out
};

}  // namespace niels::daemon::text
