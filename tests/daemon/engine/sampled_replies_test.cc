// SpliceSampledReplies (engine/sampled_replies.h) on hand-made id lists: stop id 9 ends a
// segment; a reply's history ids stand in the prompt only where the template's segment for it is
// the one it wrote when the reply ended the conversation, and everything after the first segment
// that neither equals the history's nor is such a reply is the rendering's.
#include "daemon/engine/sampled_replies.h"

#include <vector>

#include <gtest/gtest.h>

namespace niels::daemon::engine {
namespace {

using Ids = std::vector<int32_t>;
const Ids kStops = {9, 8};

Ids Join(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST(SampledRepliesTest, LastSegmentIsWhatFollowsTheLastButOneStopId) {
  EXPECT_EQ(LastSegment(Ids{1, 2, 9, 3, 4, 8, 5}, kStops), (Ids{3, 4, 8}));
  EXPECT_EQ(LastSegment(Ids{3, 4, 9}, kStops), (Ids{3, 4, 9}));
  EXPECT_EQ(LastSegment(Ids{1, 2, 3}, kStops), Ids{});
}

TEST(SampledRepliesTest, WithoutRepliesThePromptIsTheRendering) {
  const Ids history = {1, 2, 9, 3, 9, 4};
  const Ids rendering = {1, 2, 9, 3, 9, 5, 6, 9, 7};
  const SplicedPrompt spliced = SpliceSampledReplies(history, rendering, kStops, {});
  EXPECT_EQ(spliced.ids, rendering);
  EXPECT_TRUE(spliced.kept.empty());
}

TEST(SampledRepliesTest, AReplyWrittenAsBeforeKeepsItsSampledIds) {
  const Ids system = {1, 2, 9};
  const Ids user = {3, 3, 9};
  const Ids sampled = {4, 50, 51, 52, 9};   // the header 4, then what the model wrote
  const Ids canonical = {4, 60, 9};        // the template's spelling of the same message
  const Ids result = {5, 70, 9};
  const Ids generation = {4};
  const Ids history = Join({system, user, sampled});
  const Ids rendering = Join({system, user, canonical, result, generation});
  const sessions::SampledReply reply{1, static_cast<int64_t>(history.size()), canonical};
  const SplicedPrompt spliced = SpliceSampledReplies(history, rendering, kStops, std::vector{reply});
  EXPECT_EQ(spliced.ids, Join({system, user, sampled, result, generation}));
  ASSERT_EQ(spliced.kept.size(), 1u);
  EXPECT_EQ(spliced.kept[0], reply);
}

TEST(SampledRepliesTest, AReplyTheTemplateNowWritesOtherwiseIsRenderedAgain) {
  const Ids system = {1, 9};
  const Ids sampled = {4, 50, 51, 9};
  const Ids when_last = {4, 61, 60, 9};    // e.g. with its reasoning while it was the last message
  const Ids now = {4, 60, 9};              // the reasoning dropped once a new user message follows
  const Ids history = Join({system, sampled});
  const Ids rendering = Join({system, now, {3, 9}, {4}});
  const sessions::SampledReply reply{0, static_cast<int64_t>(history.size()), when_last};
  const SplicedPrompt spliced = SpliceSampledReplies(history, rendering, kStops, std::vector{reply});
  EXPECT_EQ(spliced.ids, rendering);
  EXPECT_TRUE(spliced.kept.empty());
  // A reply whose own rendering is not known yet matches nothing either.
  const sessions::SampledReply unknown{0, static_cast<int64_t>(history.size()), {}};
  EXPECT_EQ(SpliceSampledReplies(history, Join({system, when_last, {4}}), kStops, std::vector{unknown}).ids,
            Join({system, when_last, {4}}));
}

TEST(SampledRepliesTest, SeveralRepliesAndAChangeBetweenThem) {
  const Ids system = {1, 9};
  const Ids reply1 = {4, 50, 9}, canonical1 = {4, 60, 9};
  const Ids result1 = {5, 70, 9};
  const Ids reply2 = {4, 51, 52, 8}, canonical2 = {4, 61, 8};
  const Ids history = Join({system, reply1, result1, reply2, {33}});  // 33: raw ids after the last reply
  const std::vector<sessions::SampledReply> replies = {
      {0, static_cast<int64_t>(system.size() + reply1.size()), canonical1},
      {2, static_cast<int64_t>(history.size() - 1), canonical2}};
  // Both written as before: both stand, and the rendering's new messages follow the second.
  const Ids rendering = Join({system, canonical1, result1, canonical2, {5, 71, 9}, {4}});
  SplicedPrompt spliced = SpliceSampledReplies(history, rendering, kStops, replies);
  EXPECT_EQ(spliced.ids, Join({system, reply1, result1, reply2, {5, 71, 9}, {4}}));
  EXPECT_EQ(spliced.kept, replies);
  // A reply the model ended on another stop id than the template's: its ids end on the template's.
  const Ids rendering8 = Join({system, canonical1, result1, {4, 61, 9}, {4}});
  std::vector<sessions::SampledReply> ended_otherwise = replies;
  ended_otherwise[1].rendering = {4, 61, 9};
  spliced = SpliceSampledReplies(history, rendering8, kStops, ended_otherwise);
  EXPECT_EQ(spliced.ids, Join({system, reply1, result1, {4, 51, 52, 9}, {4}}));
  EXPECT_EQ(spliced.kept, ended_otherwise);
  // The tool result between them changed: the first reply stands, the rest is the rendering's.
  const Ids edited = Join({system, canonical1, {5, 72, 9}, canonical2, {4}});
  spliced = SpliceSampledReplies(history, edited, kStops, replies);
  EXPECT_EQ(spliced.ids, Join({system, reply1, {5, 72, 9}, canonical2, {4}}));
  ASSERT_EQ(spliced.kept.size(), 1u);
  EXPECT_EQ(spliced.kept[0], replies[0]);
  // The system prompt changed: nothing stands.
  const Ids other_system = Join({{2, 9}, canonical1, result1, canonical2, {4}});
  spliced = SpliceSampledReplies(history, other_system, kStops, replies);
  EXPECT_EQ(spliced.ids, other_system);
  EXPECT_TRUE(spliced.kept.empty());
  // A rendering shorter than the history (a message left out at the end): only what both hold.
  const Ids shorter = Join({system, canonical1, {4}});
  spliced = SpliceSampledReplies(history, shorter, kStops, replies);
  EXPECT_EQ(spliced.ids, Join({system, reply1, {4}}));
}

}  // namespace
}  // namespace niels::daemon::engine
