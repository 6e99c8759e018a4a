// The vocabulary's loop-table cache (Vocabulary::LoopTableFor), shared by every request of a
// model: bounded in tables and bytes, least recently used out first, so a client that brings many
// character sets cannot pin it -- another request's set is built once and then served from the
// cache while it is in use. Counted with Vocabulary::loop_table_cache_stats().
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "daemon/grammar/code_point_set.h"
#include "daemon/grammar/utf8.h"
#include "daemon/grammar/vocabulary.h"

namespace niels::daemon::grammar {
namespace {
namespace loop_table_cache_test {  // this file's own names: the suite compiles as one unity unit

std::string Utf8(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, &out);
  return out;
}

// Printable ASCII tokens (one and two characters) and a few non-ASCII ones.
std::shared_ptr<const Vocabulary> SmallVocabulary() {
  std::vector<VocabularyToken> tokens;
  for (uint32_t c = 0x20; c < 0x7F; ++c) tokens.push_back({std::string(1, static_cast<char>(c)), TokenKind::kText});
  for (uint32_t c = 'a'; c <= 'z'; ++c) tokens.push_back({std::string(1, static_cast<char>(c)) + "e", TokenKind::kText});
  for (uint32_t cp = 0x100; cp < 0x140; ++cp) tokens.push_back({Utf8(cp), TokenKind::kText});
  tokens.push_back({"", TokenKind::kEndOfOutput});
  return *Vocabulary::Create(std::move(tokens));
}

// Distinct sets: printable ASCII and one code point of its own.
CodePointSet LoopSet(uint32_t n) { return CodePointSet({{0x20, 0x7E}, {0x1000 + n, 0x1000 + n}}); }

TEST(LoopTableCacheTest, OneClientsSetsDoNotPinTheCache) {
  const auto vocab = SmallVocabulary();
  constexpr size_t kBound = Vocabulary::kMaxLoopTables;
  // A client brings 100 distinct sets, each once: every one is built, the cache keeps the bound.
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_NE(vocab->LoopTableFor(LoopSet(i)), nullptr);
    ASSERT_LE(vocab->loop_table_cache_stats().tables, kBound);
  }
  Vocabulary::LoopTableCacheStats stats = vocab->loop_table_cache_stats();
  EXPECT_EQ(stats.builds, 100u);
  EXPECT_EQ(stats.tables, kBound);
  EXPECT_EQ(stats.evictions, 100u - kBound);

  // Another request's set after that: built once, then served from the cache (the same table).
  const CodePointSet mine = LoopSet(5000);
  const std::shared_ptr<const Vocabulary::LoopTable> first = vocab->LoopTableFor(mine);
  EXPECT_EQ(vocab->LoopTableFor(mine).get(), first.get());
  EXPECT_EQ(vocab->loop_table_cache_stats().builds, 101u);

  // While it is in use, fewer than the bound of new sets between its lookups never push it out.
  uint64_t builds = 101;
  for (uint32_t round = 0; round < 5; ++round) {
    for (uint32_t j = 0; j + 1 < kBound; ++j) vocab->LoopTableFor(LoopSet(10000 + round * 100 + j));
    builds += kBound - 1;
    EXPECT_EQ(vocab->LoopTableFor(mine).get(), first.get()) << round;
    stats = vocab->loop_table_cache_stats();
    EXPECT_EQ(stats.builds, builds) << "only the new sets were built";
    EXPECT_LE(stats.tables, kBound);
  }
  // Unused for the bound's number of newer sets, it is out: the next lookup builds it once more.
  for (uint32_t j = 0; j < kBound; ++j) vocab->LoopTableFor(LoopSet(20000 + j));
  builds += kBound;
  vocab->LoopTableFor(mine);
  vocab->LoopTableFor(mine);
  stats = vocab->loop_table_cache_stats();
  EXPECT_EQ(stats.builds, builds + 1);
  EXPECT_EQ(stats.tables, kBound);
  EXPECT_EQ(stats.evictions, stats.builds - stats.tables);
  EXPECT_LE(stats.bytes, Vocabulary::kMaxLoopTableCacheBytes);
  EXPECT_GT(stats.bytes, 0u);
}

TEST(LoopTableCacheTest, TheCacheKeepsItsByteBound) {
  // 200,000 two-character CJK tokens: outside every set below, so each table lists all of them as
  // exits (~2.4 MB a table) and the byte bound, not the count, limits the cache.
  std::vector<VocabularyToken> tokens;
  for (uint32_t k = 0; k < 200000; ++k) tokens.push_back({Utf8(0x4E00 + k / 500) + Utf8(0x4E00 + k % 500), TokenKind::kText});
  const auto vocab = *Vocabulary::Create(std::move(tokens));
  constexpr uint32_t kSets = 40;
  for (uint32_t i = 0; i < kSets; ++i) {
    const auto table = vocab->LoopTableFor(LoopSet(i));
    ASSERT_EQ(table->exits.size(), 200000u);
    const Vocabulary::LoopTableCacheStats stats = vocab->loop_table_cache_stats();
    ASSERT_LE(stats.bytes, Vocabulary::kMaxLoopTableCacheBytes) << i;
    EXPECT_EQ(vocab->LoopTableFor(LoopSet(i)).get(), table.get()) << "the newest table is kept";
  }
  const Vocabulary::LoopTableCacheStats stats = vocab->loop_table_cache_stats();
  EXPECT_EQ(stats.builds, kSets);
  EXPECT_LT(stats.tables, static_cast<size_t>(kSets));
  EXPECT_GT(stats.tables, 10u);
  EXPECT_EQ(stats.evictions, kSets - stats.tables);
  // The table bytes counted: at least the exits themselves.
  EXPECT_GE(stats.bytes, stats.tables * 200000 * sizeof(Vocabulary::LoopExit));
  std::printf("[ grammar ] loop-table cache: %u tables of 200000 exits built, %zu kept in %zu bytes (bound %zu)\n",
              kSets, stats.tables, stats.bytes, Vocabulary::kMaxLoopTableCacheBytes);
}

}  // namespace loop_table_cache_test
}  // namespace
}  // namespace niels::daemon::grammar
