// ReplySplitter: a reply's reasoning and answer, as Qwen3's template reads a reply back
// (content.split('</think>')...: reasoning without the newlines around it, answer without leading
// newlines), and the same split however the text arrives in pieces.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/text/reply_splitter.h"
#include "daemon/text/text_stream.h"
#include "tests/daemon/text/reference_tokenizers.h"

namespace niels::daemon::text {
namespace {
namespace reply_splitter_test {  // this file's own names: the suite compiles as one unity unit

struct Case {
  std::string text;
  bool starts_in_reasoning;
  std::string reasoning;
  std::string answer;
};

// The split Qwen3's chat template makes of a reply that has a close tag (its `reasoning_content`
// and `content` when the message has no reasoning_content), written out the way the template does
// it: independent of the splitter's incremental code.
ReplyDelta TemplateSplit(const std::string& text) {
  const size_t close = text.find("</think>");
  std::string before = text.substr(0, close);
  std::string after = text.substr(close + 8);
  while (!before.empty() && before.back() == '\n') before.pop_back();           // rstrip('\n')
  const size_t open = before.rfind("<think>");                                    // split('<think>')[-1]
  if (open != std::string::npos) before = before.substr(open + 7);
  before.erase(0, before.find_first_not_of('\n') == std::string::npos ? before.size() : before.find_first_not_of('\n'));
  after.erase(0, after.find_first_not_of('\n') == std::string::npos ? after.size() : after.find_first_not_of('\n'));
  return {after, before};
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"<think>\nLet me think.\n</think>\n\nThe answer is 4.", false, "Let me think.", "The answer is 4."},
      {"<think>\n\n</think>\n\nNo reasoning.", false, "", "No reasoning."},
      {"Just an answer.", false, "", "Just an answer."},
      {"  <think>a</think>b", false, "a", "b"},
      {"<thin", false, "", "<thin"},                       // the start of a tag that never came
      {"<think>\ncut inside the reasoning\n\n", false, "cut inside the reasoning", ""},
      {"<think>\ncut inside the tag </thi", false, "cut inside the tag </thi", ""},
      {"reasoning from the start\n</think>\n\nanswer", true, "reasoning from the start", "answer"},
      {"answer <think>not reasoning</think>", false, "", "answer <think>not reasoning</think>"},
      {"<think>a\n\nb</think>c</think>d", false, "a\n\nb", "c</think>d"},
      {"<think>x</think>", false, "x", ""},
      {"", false, "", ""},
      {"\n\n", true, "", ""},
      {"日本語<think>", false, "", "日本語<think>"},
      {"<think>日本語の推論</think>\n答え", false, "日本語の推論", "答え"},
  };
  return cases;
}

TEST(ReplySplitterTest, SplitsAsQwen3ReadsAReplyBack) {
  for (const Case& c : Cases()) {
    const ReplyDelta split = ReplySplitter::Split(c.text, ReasoningTags{}, c.starts_in_reasoning);
    EXPECT_EQ(split.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(split.answer, c.answer) << c.text;
    if (c.text.find("</think>") != std::string::npos && c.text.starts_with("<think>")) {
      const ReplyDelta want = TemplateSplit(c.text);
      EXPECT_EQ(split.reasoning, want.reasoning) << c.text;
      EXPECT_EQ(split.answer, want.answer) << c.text;
    }
  }
}

TEST(ReplySplitterTest, WithoutTagsEverythingIsAnswer) {
  for (const Case& c : Cases()) {
    const ReplyDelta split = ReplySplitter::Split(c.text, std::nullopt, c.starts_in_reasoning);
    EXPECT_EQ(split.answer, c.text);
    EXPECT_EQ(split.reasoning, "");
  }
}

// Every cut of the text into pieces (all single cuts, then random multi-cuts) gives the same split.
TEST(ReplySplitterTest, PiecesDoNotChangeTheSplit) {
  std::mt19937 rng(7);
  for (const Case& c : Cases()) {
    const ReplyDelta whole = ReplySplitter::Split(c.text, ReasoningTags{}, c.starts_in_reasoning);
    std::vector<std::vector<size_t>> cuttings;
    for (size_t at = 0; at <= c.text.size(); ++at) cuttings.push_back({at});
    for (int r = 0; r < 200; ++r) {
      std::vector<size_t> cuts;
      for (size_t at = 0; at <= c.text.size(); ++at) {
        if (rng() % 3 == 0) cuts.push_back(at);
      }
      cuttings.push_back(cuts);
    }
    for (const std::vector<size_t>& cuts : cuttings) {
      ReplySplitter splitter(ReasoningTags{}, c.starts_in_reasoning);
      ReplyDelta got;
      size_t from = 0;
      for (size_t at : cuts) {
        const ReplyDelta d = splitter.Add(std::string_view(c.text).substr(from, at - from));
        got.answer += d.answer;
        got.reasoning += d.reasoning;
        from = at;
      }
      ReplyDelta d = splitter.Add(std::string_view(c.text).substr(from));
      got.answer += d.answer;
      got.reasoning += d.reasoning;
      d = splitter.Finish();
      got.answer += d.answer;
      got.reasoning += d.reasoning;
      ASSERT_EQ(got.answer, whole.answer) << c.text << " cut " << cuts.size() << " times";
      ASSERT_EQ(got.reasoning, whole.reasoning) << c.text;
    }
  }
}

// Text is handed out as soon as it is decided: reasoning before the close tag arrives.
TEST(ReplySplitterTest, HandsOutReasoningEarly) {
  ReplySplitter splitter(ReasoningTags{}, false);
  EXPECT_EQ(splitter.Add("<think>\n").reasoning, "");
  EXPECT_EQ(splitter.Add("step one").reasoning, "step one");
  EXPECT_EQ(splitter.Add("\n").reasoning, "");  // may be the newline before the close tag
  EXPECT_EQ(splitter.Add("step two<").reasoning, "\nstep two");
  const ReplyDelta closed = splitter.Add("/think>\n\nAnswer");
  EXPECT_EQ(closed.reasoning, "");
  EXPECT_EQ(closed.answer, "Answer");
}

// A reply as the engine streams it: the ids of a real tokenizer, one at a time, through TextStream and
// the splitter. Qwen3 has <think> and </think> as single ids; Llama 3 cuts them into several ids
// ("</", "think", ">") and a multi-byte character across ids. The deltas add up to the whole split.
TEST(ReplySplitterTest, TokenByTokenEqualsTheWholeReply) {
  const std::string replies[] = {
      "<think>\nThe user greets. 日本語で答える?\n</think>\n\nこんにちは! 😀",
      "<think>\n\n</think>\n\nNo reasoning.",
      "Just an answer with </think> inside.",
      "<think>cut inside the reasoning </thi",
  };
  for (const char* name : {"qwen3", "llama3_2"}) {
    std::unique_ptr<BpeTokenizer> tokenizer = testing::LoadReferenceTokenizer(name);
    ASSERT_NE(tokenizer, nullptr);
    for (const std::string& reply : replies) {
      auto ids = tokenizer->Encode(reply);
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      TextStream text(*tokenizer);
      ReplySplitter splitter(ReasoningTags{}, false);
      ReplyDelta got;
      for (size_t i = 0; i < ids->size(); ++i) {
        const ReplyDelta d = splitter.Add(text.Add((*ids)[i], i + 1 == ids->size()));
        got.answer += d.answer;
        got.reasoning += d.reasoning;
      }
      const ReplyDelta rest = splitter.Finish();
      got.answer += rest.answer;
      got.reasoning += rest.reasoning;
      const ReplyDelta whole = ReplySplitter::Split(reply, ReasoningTags{}, false);
      EXPECT_EQ(got.answer, whole.answer) << name << ": " << reply;
      EXPECT_EQ(got.reasoning, whole.reasoning) << name << ": " << reply;
    }
  }
}

}  // namespace reply_splitter_test
}  // namespace
}  // namespace niels::daemon::text
