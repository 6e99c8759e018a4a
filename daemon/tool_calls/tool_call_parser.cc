#include "daemon/tool_calls/tool_call_parser.h"

#include <algorithm>
#include <array>
#include <utility>

#include "daemon/tool_calls/call_shapes.h"
#include "daemon/tool_calls/json_text.h"

namespace niels::daemon::tool_calls {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kLlamaPythonTag = "<|python_tag|>";

// KMP's failure table of <tool_call>: entry i is the length of the longest proper prefix of
// kHermesOpen[0..i] that is also its suffix.
constexpr std::array<size_t, kHermesOpen.size()> OpenTagFailureTable() {
  std::array<size_t, kHermesOpen.size()> table{};
  size_t k = 0;
  for (size_t i = 1; i < kHermesOpen.size(); ++i) {
    while (k > 0 && kHermesOpen[i] != kHermesOpen[k]) k = table[k - 1];
    if (kHermesOpen[i] == kHermesOpen[k]) ++k;
    table[i] = k;
  }
  return table;
}
constexpr std::array<size_t, kHermesOpen.size()> kOpenTagFailure = OpenTagFailureTable();

std::vector<std::string> Sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// One reply's parser: a byte-at-a-time state machine shared by the families, which differ in where
// an attempt may start (anywhere for kHermes, at the reply's start and after a call for the JSON
// families), how it ends (kHermes' closing tag) and what its object must hold (call_shapes.h).
// Every decision depends only on the bytes so far, never on how they were cut into pieces.
class StreamingToolCallParser final : public ToolCallParser {
 public:
  StreamingToolCallParser(ToolCallFamily family, ToolCallParserOptions options)
      : family_(family),
        tool_names_(Sorted(std::move(options.tool_names))),
        max_call_bytes_(options.max_call_bytes < 1 ? 1 : options.max_call_bytes) {
    if (!options.calls_allowed) {
      state_ = State::kPlain;
    } else {
      state_ = family_ == ToolCallFamily::kHermes ? State::kText : State::kReplyStart;
    }
  }

  Delta Feed(std::string_view text) override {
    for (char c : text) Step(c);
    return TakeDelta();
  }

  FinalReply Finish() override {
    if (state_ == State::kText) {
      content_.append(kHermesOpen.substr(0, matched_));
      matched_ = 0;
    } else {
      content_.append(held_);
      held_.clear();
    }
    state_ = State::kPlain;
    FinalReply reply;
    reply.last = TakeDelta();
    reply.content = content_;
    reply.calls = calls_;
    return reply;
  }

  size_t held_back_bytes() const override { return state_ == State::kText ? matched_ : held_.size(); }
  uint64_t work_units() const override { return work_; }

 private:
  enum class State {
    kReplyStart,    // JSON families: only whitespace so far (it is content)
    kPythonTag,     // kLlama3Json: the reply's start matches <|python_tag|> so far (held_)
    kText,          // kHermes: outside calls; the last matched_ bytes may start <tool_call>
    kBeforeObject,  // an attempt after its trigger: whitespace until the object's `{`
    kObject,        // an attempt inside its object (held_ from object_begin_ on)
    kCloseTag,      // kHermes: a valid object was read; whitespace, then </tool_call>
    kAfterCall,     // kLlama3Json: after a call; another may follow
    kPlain,         // the rest of the reply is content
  };

  void Step(char c) {
    ++work_;
    switch (state_) {
      case State::kReplyStart:
        if (IsJsonSpace(c)) {
          content_.push_back(c);
        } else if (c == '{') {
          BeginObject(c);
        } else if (c == kLlamaPythonTag[0] && family_ == ToolCallFamily::kLlama3Json) {
          if (Hold(c)) {
            matched_ = 1;
            state_ = State::kPythonTag;
          }
        } else {
          state_ = State::kPlain;
          content_.push_back(c);
        }
        return;
      case State::kPythonTag:
        if (c != kLlamaPythonTag[matched_] || !Hold(c)) return Fail(c, /*read_again=*/true);
        if (++matched_ == kLlamaPythonTag.size()) state_ = State::kBeforeObject;
        return;
      case State::kText:
        return StepText(c);
      case State::kBeforeObject:
        if (IsJsonSpace(c)) {
          if (!Hold(c)) Fail(c, /*read_again=*/true);
        } else if (c == '{') {
          BeginObject(c);
        } else {
          Fail(c, /*read_again=*/true);
        }
        return;
      case State::kObject:
        return StepObject(c);
      case State::kCloseTag:
        if (matched_ == 0 && IsJsonSpace(c)) {
          if (!Hold(c)) Fail(c, /*read_again=*/true);
          return;
        }
        // The start of a closing tag that turns out to be something else is read again as text:
        // `<tool_call>` right after an object (a model that forgot the closing tag) opens a call.
        if (c != kHermesClose[matched_] || !Hold(c)) return Fail(c, /*read_again=*/true, /*read_again_tail=*/matched_);
        if (++matched_ == kHermesClose.size()) {
          CommitCalls();
          state_ = State::kText;
        }
        return;
      case State::kAfterCall:
        if (IsJsonSpace(c)) {
          content_.push_back(c);
        } else if (c == ';') {
          if (Hold(c)) state_ = State::kBeforeObject;
        } else if (c == '{') {
          BeginObject(c);
        } else {
          state_ = State::kPlain;
          content_.push_back(c);
        }
        return;
      case State::kPlain:
        content_.push_back(c);
        return;
    }
  }

  // kHermes outside calls: Knuth-Morris-Pratt over <tool_call>. The bytes that stop being a
  // possible start of the tag become content.
  void StepText(char c) {
    while (matched_ > 0 && c != kHermesOpen[matched_]) {
      const size_t kept = kOpenTagFailure[matched_ - 1];
      content_.append(kHermesOpen.substr(0, matched_ - kept));
      matched_ = kept;
      ++work_;
    }
    if (c != kHermesOpen[matched_]) {
      content_.push_back(c);
      return;
    }
    if (++matched_ < kHermesOpen.size()) return;
    matched_ = 0;
    if (kHermesOpen.size() > max_call_bytes_) {  // no call fits: the tag is text
      content_.append(kHermesOpen);
      return;
    }
    held_.assign(kHermesOpen);
    state_ = State::kBeforeObject;
  }

  void StepObject(char c) {
    if (!Hold(c)) return Fail(c, /*read_again=*/true);
    if (!object_end_.Add(c)) return;
    std::optional<std::vector<ToolCall>> calls =
        CallsOfObject(family_, std::string_view(held_).substr(object_begin_), tool_names_, &work_);
    if (!calls) return Fail(c, /*read_again=*/false);  // the closing brace belongs to the failed text
    pending_calls_ = std::move(*calls);
    switch (family_) {
      case ToolCallFamily::kHermes:
        matched_ = 0;
        state_ = State::kCloseTag;
        return;
      case ToolCallFamily::kLlama3Json:
        CommitCalls();
        state_ = State::kAfterCall;
        return;
      case ToolCallFamily::kGenericJson:
        CommitCalls();
        state_ = State::kPlain;
        return;
    }
  }

  // `c` opens an object: from a trigger (held_ has it) or right at the reply's start or after a
  // call (held_ empty).
  void BeginObject(char c) {
    if (!Hold(c)) return Fail(c, /*read_again=*/true);
    object_begin_ = held_.size() - 1;
    object_end_.Reset();
    object_end_.Add(c);
    state_ = State::kObject;
  }

  // Adds `c` to the open attempt; false (nothing added) when the attempt would exceed
  // max_call_bytes.
  bool Hold(char c) {
    if (held_.size() >= max_call_bytes_) return false;
    held_.push_back(c);
    return true;
  }

  // The open attempt failed at `c`: its text is content. kHermes goes on looking for calls, the
  // JSON families take the rest of the reply as content. `read_again`: `c` is not part of the
  // failed text and is read again in the new state, after the last `read_again_tail` held bytes
  // (a partial closing tag, at most its length: each byte is read again at most once).
  void Fail(char c, bool read_again, size_t read_again_tail = 0) {
    const std::string tail = held_.substr(held_.size() - read_again_tail);
    content_.append(held_, 0, held_.size() - read_again_tail);
    held_.clear();
    pending_calls_.clear();
    matched_ = 0;
    state_ = family_ == ToolCallFamily::kHermes ? State::kText : State::kPlain;
    for (char t : tail) Step(t);
    if (read_again) Step(c);
  }

  void CommitCalls() {
    for (ToolCall& call : pending_calls_) calls_.push_back(std::move(call));
    pending_calls_.clear();
    held_.clear();
    matched_ = 0;
  }

  Delta TakeDelta() {
    Delta delta;
    if (content_sent_ < content_.size()) {
      delta.content.assign(content_, content_sent_);
      content_sent_ = content_.size();
    }
    for (; calls_sent_ < calls_.size(); ++calls_sent_) {
      delta.calls.push_back({calls_sent_, calls_[calls_sent_].name, calls_[calls_sent_].arguments});
    }
    return delta;
  }

  const ToolCallFamily family_;
  const std::vector<std::string> tool_names_;  // sorted
  const size_t max_call_bytes_;

  State state_;
  size_t matched_ = 0;  // bytes of the tag being matched (kText, kPythonTag, kCloseTag)
  std::string held_;    // the open attempt's text (kPythonTag, kBeforeObject, kObject, kCloseTag)
  size_t object_begin_ = 0;  // where the attempt's object starts in held_
  JsonObjectEnd object_end_;
  std::vector<ToolCall> pending_calls_;  // kHermes: the object's call, until its closing tag

  std::string content_;  // all content so far
  size_t content_sent_ = 0;
  std::vector<ToolCall> calls_;  // all calls so far
  size_t calls_sent_ = 0;
  uint64_t work_ = 0;
};

}  // namespace

std::string_view ToolCallFamilyName(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kHermes:
      return "hermes";
    case ToolCallFamily::kLlama3Json:
      return "llama3_json";
    case ToolCallFamily::kGenericJson:
      return "generic_json";
  }
  return "unknown";
}

std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolCallFamily family, ToolCallParserOptions options) {
  return std::make_unique<StreamingToolCallParser>(family, std::move(options));
}

FinalReply ParseToolCalls(ToolCallFamily family, const ToolCallParserOptions& options, std::string_view text) {
  StreamingToolCallParser parser(family, options);
  Delta first = parser.Feed(text);
  FinalReply reply = parser.Finish();
  first.content += reply.last.content;
  for (ToolCallDelta& call : reply.last.calls) first.calls.push_back(std::move(call));
  reply.last = std::move(first);
  return reply;
}

}  // namespace niels::daemon::tool_calls
