// StopStringScanner against a naive reference: the first match to complete (earliest start among
// those completing at the same byte) found with std::string::find over every prefix, and the
// held-back length as the longest end of the text that is a proper prefix of a stop string, over
// random texts on a small alphabet (so stop strings overlap and repeat) fed in random pieces.

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "daemon/text/stop_strings.h"

namespace niels::daemon::text {
namespace {

struct NaiveMatch {
  size_t index, start, end;
};

// The first stop string to complete in `text`: the smallest end, then the smallest start.
std::optional<NaiveMatch> NaiveFirst(const std::string& text, const std::vector<std::string>& stops) {
  std::optional<NaiveMatch> best;
  for (size_t s = 0; s < stops.size(); ++s) {
    const size_t at = text.find(stops[s]);
    if (at == std::string::npos) continue;
    const NaiveMatch m{s, at, at + stops[s].size()};
    if (!best || m.end < best->end || (m.end == best->end && m.start < best->start)) best = m;
  }
  return best;
}

size_t NaiveHeldBack(const std::string& text, const std::vector<std::string>& stops) {
  size_t most = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size() - 1, text.size()); k > most; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        most = k;
        break;
      }
    }
  }
  return most;
}

TEST(StopStringsTest, AgreesWithANaiveSearchOnRandomTextsAndSplits) {
  std::mt19937 rng(7);
  auto random_string = [&](size_t min_len, size_t max_len) {
    std::string out(std::uniform_int_distribution<size_t>(min_len, max_len)(rng), 'a');
    for (char& c : out) c = static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng));
    return out;
  };
  int matched = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    const int count = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int i = 0; i < count; ++i) stops.push_back(random_string(1, 6));
    const std::string text = random_string(0, 40);
    StopStringScanner scanner(stops);
    std::string fed;
    size_t at = 0;
    while (at < text.size()) {
      const size_t piece = std::uniform_int_distribution<size_t>(0, 5)(rng);
      const std::string part = text.substr(at, piece);
      at += part.size();
      const std::optional<StopMatch> got = scanner.Feed(part);
      fed += part;
      const std::optional<NaiveMatch> want = NaiveFirst(fed, stops);
      ASSERT_EQ(got.has_value(), want.has_value()) << "text " << fed;
      if (want) {
        EXPECT_EQ(got->start, want->start) << fed;
        EXPECT_EQ(stops[got->index], stops[want->index]) << fed;
        EXPECT_EQ(scanner.size(), want->end) << "the scan stops at the byte that completes the match";
        EXPECT_EQ(scanner.held_back(), 0u);
        ++matched;
        break;
      }
      EXPECT_EQ(scanner.size(), fed.size());
      EXPECT_EQ(scanner.held_back(), NaiveHeldBack(fed, stops)) << "text " << fed;
    }
  }
  EXPECT_GT(matched, 1000);  // the cases exercise matches, not only misses
}

TEST(StopStringsTest, AMatchTakesNothingMore) {
  StopStringScanner scanner({"\n\nUser:", "###"});
  EXPECT_FALSE(scanner.Feed("Hello.\n").has_value());
  EXPECT_EQ(scanner.held_back(), 1u);
  EXPECT_FALSE(scanner.Feed("\nUse").has_value());
  EXPECT_EQ(scanner.held_back(), 5u);
  const std::optional<StopMatch> m = scanner.Feed("r: and more ###");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->index, 0u);
  EXPECT_EQ(m->start, 6u);
  EXPECT_EQ(scanner.size(), 13u);
  EXPECT_EQ(scanner.Feed("###")->start, 6u);
  EXPECT_EQ(scanner.size(), 13u);
}

// Work per byte: a text of n bytes over S stop strings costs at most 2 x n x S automaton steps
// (counted), the KMP failure links keeping the worst cases (a long run of one byte against
// "aaa...ab", alternating near-matches) linear; a naive rescan would take ~n x 128 per stop.
TEST(StopStringsTest, ALongRunAgainstAnOverlappingStopIsLinear) {
  const std::string stop = std::string(127, 'a') + "b";
  StopStringScanner scanner({stop});
  const std::string run(1 << 20, 'a');
  EXPECT_FALSE(scanner.Feed(run).has_value());
  EXPECT_EQ(scanner.held_back(), 127u);
  EXPECT_LE(scanner.steps(), 2 * run.size());
  const std::optional<StopMatch> m = scanner.Feed("b");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->start, run.size() - 127);

  std::string near;
  for (int i = 0; i < 4096; ++i) near += std::string(127, 'a') + "c";
  StopStringScanner two({stop, "aab", std::string(64, 'a') + "c" + std::string(64, 'a') + "d"});
  EXPECT_FALSE(two.Feed(near).has_value());
  EXPECT_LE(two.steps(), 2 * near.size() * 3);
}

}  // namespace
}  // namespace niels::daemon::text
