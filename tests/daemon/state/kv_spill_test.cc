// KV spill files and their store: exact round trips from a strided whole-cache layout and from
// fixed-size blocks, every kind of damage refused before anything is handed out, and the LRU budget.
#include <sys/stat.h>

#include <filesystem>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/state/kv_spill_file.h"
#include "daemon/state/kv_spill_store.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::state {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint32_t kLayers = 3, kHeads = 2, kHeadDim = 4;

// A cache as KvCache stores it: per layer and kind, [heads, capacity, head_dim] floats.
struct FakeCache {
  int64_t capacity;
  std::vector<std::vector<float>> k, v;
  FakeCache(int64_t capacity, uint32_t seed) : capacity(capacity) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (uint32_t l = 0; l < kLayers; ++l) {
      k.emplace_back(kHeads * capacity * kHeadDim);
      v.emplace_back(kHeads * capacity * kHeadDim);
      for (float& x : k.back()) x = dist(rng);
      for (float& x : v.back()) x = dist(rng);
    }
  }
  float& at(KvKind kind, uint32_t layer, int64_t head, int64_t pos, int64_t d) {
    auto& store = kind == KvKind::kKeys ? k : v;
    return store[layer][(head * capacity + pos) * kHeadDim + d];
  }
};

KvSpillHeader Header(int64_t positions, const std::vector<int32_t>& tokens) {
  KvSpillHeader header;
  header.model_fingerprint = "00112233445566778899aabbccddeeff";
  header.layers = kLayers;
  header.heads = kHeads;
  header.head_dim = kHeadDim;
  header.positions = positions;
  header.tokens_hash = HashTokens(std::span(tokens).first(static_cast<size_t>(positions)));
  return header;
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(i * 7 + 1);
  return tokens;
}

// Writes positions [0, n) of `cache` as one range per layer and kind.
uint64_t WriteWhole(const fs::path& path, FakeCache& cache, const KvSpillHeader& header) {
  auto writer = KvSpillWriter::Create(path, header);
  EXPECT_TRUE(writer.ok());
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (KvKind kind : {KvKind::kKeys, KvKind::kValues}) {
      EXPECT_TRUE((*writer)->AddRange(l, kind, 0, header.positions, &cache.at(kind, l, 0, 0, 0),
                                      cache.capacity * kHeadDim).ok());
    }
  }
  auto bytes = (*writer)->Finish();
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : 0;
}

// Reads `path` into a fresh cache of `capacity`; returns the status.
common::Status ReadInto(const fs::path& path, const KvSpillHeader& header, FakeCache& out, int* calls = nullptr) {
  return ReadKvSpill(path, header, [&](const KvSpillRange& range) {
    if (calls) ++*calls;
    for (uint32_t h = 0; h < kHeads; ++h) {
      for (int64_t p = 0; p < range.count; ++p) {
        for (uint32_t d = 0; d < kHeadDim; ++d) {
          out.at(range.kind, range.layer, h, range.begin + p, d) = static_cast<const float*>(range.data)[(h * range.count + p) * kHeadDim + d];
        }
      }
    }
  });
}

void ExpectSamePrefix(FakeCache& a, FakeCache& b, int64_t n) {
  for (KvKind kind : {KvKind::kKeys, KvKind::kValues}) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t p = 0; p < n; ++p) {
          for (int64_t d = 0; d < kHeadDim; ++d) ASSERT_EQ(a.at(kind, l, h, p, d), b.at(kind, l, h, p, d));
        }
      }
    }
  }
}

TEST(KvSpillFileTest, WholeCacheRoundTripIsExact) {
  testing::TempDir dir;
  FakeCache cache(64, 1);
  const auto tokens = Tokens(50);
  const KvSpillHeader header = Header(37, tokens);  // a prefix, from a strided (capacity 64) layout
  const uint64_t bytes = WriteWhole(dir / "a.kv", cache, header);
  EXPECT_EQ(bytes, KvSpillFileBytes(header));
  EXPECT_EQ(fs::file_size(dir / "a.kv"), bytes);
  EXPECT_FALSE(fs::exists(dir / "a.kv.tmp"));
  EXPECT_EQ(PeekKvSpillPositions(dir / "a.kv").value(), 37);
  FakeCache restored(40, 99);
  ASSERT_TRUE(ReadInto(dir / "a.kv", header, restored).ok());
  ExpectSamePrefix(cache, restored, 37);
}

TEST(KvSpillFileTest, BlockRangesInAnyOrderReadBackTheSame) {
  testing::TempDir dir;
  FakeCache cache(64, 2);
  const auto tokens = Tokens(45);
  const KvSpillHeader header = Header(45, tokens);
  auto writer = KvSpillWriter::Create(dir / "b.kv", header);
  ASSERT_TRUE(writer.ok());
  // Blocks of 16 positions, the last one partial, written last block first.
  for (int64_t begin : {32, 0, 16}) {
    const int64_t count = std::min<int64_t>(16, 45 - begin);
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (KvKind kind : {KvKind::kValues, KvKind::kKeys}) {
        // A block-based cache holds [heads, 16, head_dim] per block: copy one out to write it.
        std::vector<float> block(kHeads * 16 * kHeadDim);
        for (int64_t h = 0; h < kHeads; ++h) {
          for (int64_t p = 0; p < count; ++p) {
            for (int64_t d = 0; d < kHeadDim; ++d) block[(h * 16 + p) * kHeadDim + d] = cache.at(kind, l, h, begin + p, d);
          }
        }
        ASSERT_TRUE((*writer)->AddRange(l, kind, begin, count, block.data(), 16 * kHeadDim).ok());
      }
    }
  }
  ASSERT_TRUE((*writer)->Finish().ok());
  FakeCache restored(45, 7);
  ASSERT_TRUE(ReadInto(dir / "b.kv", header, restored).ok());
  ExpectSamePrefix(cache, restored, 45);
}

TEST(KvSpillFileTest, DamageIsRefusedBeforeAnythingIsHandedOut) {
  testing::TempDir dir;
  FakeCache cache(64, 3);
  const auto tokens = Tokens(20);
  const KvSpillHeader header = Header(20, tokens);
  WriteWhole(dir / "good.kv", cache, header);
  const std::string good = testing::ReadFile(dir / "good.kv");

  auto expect_refused = [&](const std::string& bytes, const KvSpillHeader& want, const std::string& why) {
    testing::WriteFile(dir / "bad.kv", bytes);
    FakeCache out(20, 4);
    int calls = 0;
    common::Status status = ReadInto(dir / "bad.kv", want, out, &calls);
    EXPECT_EQ(status.code(), common::StatusCode::kInternal) << why;
    EXPECT_THAT(status.message(), HasSubstr("damaged KV spill file")) << why;
    EXPECT_EQ(calls, 0) << why;
  };
  for (size_t at : {size_t{3}, size_t{90}, good.size() / 2, good.size() - 1}) {
    std::string flipped = good;
    flipped[at] ^= 0x10;
    expect_refused(flipped, header, "flipped byte at " + std::to_string(at));
  }
  expect_refused(good.substr(0, good.size() - 100), header, "truncated");
  expect_refused("", header, "empty");

  KvSpillHeader other_tokens = header;
  other_tokens.tokens_hash ^= 1;
  expect_refused(good, other_tokens, "history changed since the spill");
  KvSpillHeader other_model = header;
  other_model.model_fingerprint[0] = 'f';
  expect_refused(good, other_model, "another model");
  KvSpillHeader longer = Header(19, tokens);
  expect_refused(good, longer, "another length");
}

TEST(KvSpillFileTest, IncompleteCoverageIsRefused) {
  testing::TempDir dir;
  FakeCache cache(64, 5);
  const auto tokens = Tokens(20);
  const KvSpillHeader header = Header(20, tokens);
  auto write = [&](const std::string& name, auto&& ranges) {
    auto writer = KvSpillWriter::Create(dir / name, header);
    ranges(**writer);
    ASSERT_TRUE((*writer)->Finish().ok());
  };
  // Only the keys.
  write("keys_only.kv", [&](KvSpillWriter& w) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      ASSERT_TRUE(w.AddRange(l, KvKind::kKeys, 0, 20, &cache.at(KvKind::kKeys, l, 0, 0, 0), 64 * kHeadDim).ok());
    }
  });
  // Overlapping ranges of layer 0 values (0..12 and 8..20).
  write("overlap.kv", [&](KvSpillWriter& w) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (KvKind kind : {KvKind::kKeys, KvKind::kValues}) {
        if (l == 0 && kind == KvKind::kValues) {
          ASSERT_TRUE(w.AddRange(l, kind, 0, 12, &cache.at(kind, l, 0, 0, 0), 64 * kHeadDim).ok());
          ASSERT_TRUE(w.AddRange(l, kind, 8, 12, &cache.at(kind, l, 0, 8, 0), 64 * kHeadDim).ok());
        } else {
          ASSERT_TRUE(w.AddRange(l, kind, 0, 20, &cache.at(kind, l, 0, 0, 0), 64 * kHeadDim).ok());
        }
      }
    }
  });
  for (const char* name : {"keys_only.kv", "overlap.kv"}) {
    FakeCache out(20, 6);
    int calls = 0;
    common::Status status = ReadInto(dir / name, header, out, &calls);
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_EQ(calls, 0) << name;
  }
}

TEST(KvSpillFileTest, MissingFileIsNotFoundAndAbandonedWriterLeavesNothing) {
  testing::TempDir dir;
  const auto tokens = Tokens(4);
  FakeCache out(4, 1);
  EXPECT_EQ(ReadInto(dir / "none.kv", Header(4, tokens), out).code(), common::StatusCode::kNotFound);
  {
    auto writer = KvSpillWriter::Create(dir / "half.kv", Header(4, tokens));
    ASSERT_TRUE(writer.ok());
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ------------------------------------------------------------------------------ the store

void WriteBytes(const fs::path& path, size_t n) { testing::WriteFile(path, std::string(n, 'k')); }

TEST(KvSpillStoreTest, KeepsWithinBudgetByDroppingLeastRecentlyUsed) {
  testing::TempDir dir;
  auto store = KvSpillStore::Open(dir / "kv", 1000);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(fs::status(dir / "kv").permissions() & fs::perms::all, fs::perms::owner_all);
  auto put = [&](const std::string& id, uint64_t bytes) {
    ASSERT_TRUE((*store)->Reserve(id, bytes));
    WriteBytes((*store)->PathFor(id), bytes);
    (*store)->Add(id, bytes);
  };
  put("a", 400);
  put("b", 400);
  put("a", 300);  // rewritten: a is now the most recent, and its old size no longer counts
  EXPECT_EQ((*store)->used_bytes(), 700u);
  put("c", 500);  // b (least recent) goes
  EXPECT_FALSE(fs::exists((*store)->PathFor("b")));
  EXPECT_TRUE(fs::exists((*store)->PathFor("a")));
  EXPECT_EQ((*store)->used_bytes(), 800u);
  EXPECT_EQ((*store)->evictions(), 1u);
  EXPECT_FALSE((*store)->Reserve("d", 1001));  // never fits: nothing dropped
  EXPECT_EQ((*store)->file_count(), 2u);

  auto taken = (*store)->Take("a");
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(fs::exists(*taken));  // the caller reads it, then discards it
  EXPECT_EQ((*store)->used_bytes(), 500u);
  EXPECT_FALSE((*store)->Take("a").has_value());
  (*store)->Discard("a");
  EXPECT_FALSE(fs::exists(*taken));
}

TEST(KvSpillStoreTest, ReopenScansOldestFirstAndCleansUp) {
  testing::TempDir dir;
  fs::create_directory(dir / "kv");
  WriteBytes(dir / "kv" / "old.kv", 300);
  WriteBytes(dir / "kv" / "mid.kv", 300);
  WriteBytes(dir / "kv" / "new.kv", 300);
  WriteBytes(dir / "kv" / "half.kv.tmp", 100);
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(dir / "kv" / "old.kv", now - std::chrono::hours(3));
  fs::last_write_time(dir / "kv" / "mid.kv", now - std::chrono::hours(2));
  fs::last_write_time(dir / "kv" / "new.kv", now - std::chrono::hours(1));
  auto store = KvSpillStore::Open(dir / "kv", 700);  // a smaller budget than the files: trimmed now
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(fs::exists(dir / "kv" / "half.kv.tmp"));
  EXPECT_FALSE(fs::exists(dir / "kv" / "old.kv"));
  EXPECT_EQ((*store)->used_bytes(), 600u);
  (*store)->Retain([](const std::string& id) { return id == "new"; });
  EXPECT_FALSE(fs::exists(dir / "kv" / "mid.kv"));
  EXPECT_TRUE(fs::exists(dir / "kv" / "new.kv"));
  EXPECT_EQ((*store)->file_count(), 1u);
}

}  // namespace
}  // namespace niels::daemon::state
