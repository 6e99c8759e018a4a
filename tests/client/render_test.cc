// ReplyPrinter: a reply's reasoning before its answer, dimmed (SGR 2 / 22), between <think> lines, or
// hidden; streamed in arbitrary pieces or printed at the end, the same bytes either way.
#include "client/chat/render.h"

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace niels::client {
namespace {

struct Piece {
  std::string reasoning;
  std::string text;
};

// What the printer writes for a reply given as `pieces` (streamed when `stream`).
std::string Print(ReasoningDisplay display, bool stream, const std::vector<Piece>& pieces) {
  std::ostringstream out;
  ReplyPrinter printer(out, stream, display);
  std::string reply, reasoning;
  for (const Piece& piece : pieces) {
    v1::TokenEvent event;
    event.set_reasoning(piece.reasoning);
    event.set_text(piece.text);
    printer.OnToken(event);
    reply += piece.text;
    reasoning += piece.reasoning;
  }
  printer.Finish(reply, reasoning);
  return out.str();
}

const std::vector<Piece> kReasoned = {{"fir", ""}, {"st\nsecond", ""}, {"", ""}, {"", "The "}, {"", "answer."}};

TEST(ReplyPrinterTest, ReasoningBeforeTheAnswerInEachDisplay) {
  for (const bool stream : {false, true}) {
    EXPECT_EQ(Print(ReasoningDisplay::kDim, stream, kReasoned), "\x1b[2mfirst\nsecond\x1b[22m\n\nThe answer.\n");
    EXPECT_EQ(Print(ReasoningDisplay::kTagged, stream, kReasoned), "<think>\nfirst\nsecond\n</think>\n\nThe answer.\n");
    EXPECT_EQ(Print(ReasoningDisplay::kHide, stream, kReasoned), "The answer.\n");
    // No reasoning: the answer alone, as before reasoning models.
    EXPECT_EQ(Print(ReasoningDisplay::kDim, stream, {{"", "plain"}, {"", " reply"}}), "plain reply\n");
  }
}

TEST(ReplyPrinterTest, ReplyCutInsideItsReasoningEndsTheStyle) {
  for (const bool stream : {false, true}) {
    EXPECT_EQ(Print(ReasoningDisplay::kDim, stream, {{"still thinking", ""}}), "\x1b[2mstill thinking\x1b[22m\n");
    EXPECT_EQ(Print(ReasoningDisplay::kTagged, stream, {{"still", ""}}), "<think>\nstill\n</think>\n");
    EXPECT_EQ(Print(ReasoningDisplay::kHide, stream, {{"still", ""}}), "\n");
  }
}

TEST(ReplyPrinterTest, AbortInsideTheReasoningResetsTheStyle) {
  std::ostringstream out;
  ReplyPrinter printer(out, /*stream=*/true, ReasoningDisplay::kDim);
  v1::TokenEvent event;
  event.set_reasoning("hmm");
  printer.OnToken(event);
  printer.Abort();
  EXPECT_EQ(out.str(), "\x1b[2mhmm\x1b[22m\n");
}

TEST(ReplyPrinterTest, DisplayFollowsTheFlagTheTerminalAndNoColor) {
  EXPECT_EQ(ChooseReasoningDisplay(true, true, nullptr), ReasoningDisplay::kHide);
  EXPECT_EQ(ChooseReasoningDisplay(false, true, nullptr), ReasoningDisplay::kDim);
  EXPECT_EQ(ChooseReasoningDisplay(false, true, ""), ReasoningDisplay::kDim);
  EXPECT_EQ(ChooseReasoningDisplay(false, true, "1"), ReasoningDisplay::kTagged);
  EXPECT_EQ(ChooseReasoningDisplay(false, false, nullptr), ReasoningDisplay::kTagged);
}

}  // namespace
}  // namespace niels::client
