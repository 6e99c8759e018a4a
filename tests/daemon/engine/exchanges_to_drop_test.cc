// The context policy of a template chat turn (ExchangesToDrop, template_chat_turn.h) over rendering
// lengths given as a table: which count of oldest exchanges it leaves out, how many renderings it
// asks for, and its refusals.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/template_chat_turn.h"

namespace niels::daemon::engine {
namespace {
namespace exchanges_to_drop_test {  // this file's own names: the suite compiles as one unity unit

using common::StatusOr;

// A rendering of `lengths[k]` ids with the k oldest exchanges left out; counts the questions.
struct Lengths {
  std::vector<int64_t> lengths;
  int asked = 0;
  std::function<StatusOr<int64_t>(size_t)> Fn() {
    return [this](size_t drop) -> StatusOr<int64_t> {
      ++asked;
      EXPECT_LT(drop, lengths.size());
      return lengths.at(drop);
    };
  }
};

// 100 - 10 k ids with k of 10 exchanges left out.
Lengths Falling() {
  Lengths l;
  for (int k = 0; k <= 10; ++k) l.lengths.push_back(100 - 10 * k);
  return l;
}

TEST(ExchangesToDropTest, NoneWhenTheConversationFitsWithTheRoom) {
  Lengths l = Falling();
  StatusOr<size_t> drop = ExchangesToDrop(l.Fn(), 10, 0, 20, 120, 0.5);
  ASSERT_TRUE(drop.ok()) << drop.status().ToString();
  EXPECT_EQ(*drop, 0u) << "fits: nothing is left out, whatever the low-water mark";
}

TEST(ExchangesToDropTest, TheFewestThatFitTheRoomAndTheLowWaterMark) {
  Lengths fit = Falling();
  StatusOr<size_t> drop = ExchangesToDrop(fit.Fn(), 10, 0, 10, 60, 1.0);
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(*drop, 5u) << "100 - 10 k + 10 <= 60 first at k = 5";
  EXPECT_LE(fit.asked, 2 + 4) << "2 + ceil(log2(11)) renderings at most";

  Lengths low = Falling();
  drop = ExchangesToDrop(low.Fn(), 10, 0, 10, 60, 0.5);
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(*drop, 7u) << "and at most 0.5 x 60 = 30 ids: k = 7";

  Lengths nan = Falling();
  drop = ExchangesToDrop(nan.Fn(), 10, 0, 10, 60, std::nan(""));
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(*drop, 10u) << "keep NaN counts as 0: no count reaches 0 ids, so all are left out";
}

TEST(ExchangesToDropTest, AtLeastTheMinimumAndAllWhenNoneQualifies) {
  Lengths l = Falling();
  StatusOr<size_t> drop = ExchangesToDrop(l.Fn(), 10, 3, 0, 200, 1.0);
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(*drop, 3u) << "the minimum stays left out even when less would fit";

  Lengths flat{{90, 90, 90, 90}};
  drop = ExchangesToDrop(flat.Fn(), 3, 0, 20, 100, 1.0);
  ASSERT_TRUE(drop.ok());
  EXPECT_EQ(*drop, 3u) << "no count fits the room: every exchange is left out (the rendering still fits)";
}

TEST(ExchangesToDropTest, RefusesARenderingWithNoRoomAndPassesErrorsOn) {
  Lengths full{{120, 110, 100}};
  StatusOr<size_t> drop = ExchangesToDrop(full.Fn(), 2, 0, 10, 100, 1.0);
  ASSERT_FALSE(drop.ok());
  EXPECT_EQ(drop.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(drop.status().message().find("100 tokens"), std::string::npos) << drop.status().message();

  const auto failing = [](size_t) -> StatusOr<int64_t> { return common::Status::ResourceExhausted("render budget"); };
  drop = ExchangesToDrop(failing, 4, 0, 10, 100, 1.0);
  ASSERT_FALSE(drop.ok());
  EXPECT_EQ(drop.status().code(), common::StatusCode::kResourceExhausted);
}

}  // namespace exchanges_to_drop_test
}  // namespace
}  // namespace niels::daemon::engine
