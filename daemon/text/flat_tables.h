#pragma once
// Two open-addressing hash tables for the BPE vocabulary, built once at load and read-only after:
// PieceIndex (piece string -> token id, over the pieces laid out back to back in one string) and
// MergeTable (pair of token ids -> merge rank and merged id). Linear probing, capacities a power of
// two. One array each instead of a node per entry (std::unordered_map), and keys compared in one
// contiguous string: a 151k-token vocabulary with 150k-280k merges is indexed at start-up, where
// cache misses are what costs. Lookups are safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace niels::daemon::text {

inline size_t TableCapacityFor(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  return capacity;
}

// Maps piece -> id for the ids inserted. The pieces are kept in one string, `arena`, with id's piece
// at [offsets[id], offsets[id + 1]); both must outlive the index and not change.
class PieceIndex {
 public:
  PieceIndex() = default;
  PieceIndex(const std::string* arena, const std::vector<uint32_t>* offsets, size_t expected)
      : arena_(arena), offsets_(offsets) {
    slots_.assign(TableCapacityFor(expected), Slot{0, -1});
    mask_ = slots_.size() - 1;
  }

  // Inserts id unless its piece is already present (the first id keeps it). Returns whether it did.
  // REQUIRES: fewer than capacity/2 ids inserted (the `expected` of the constructor).
  bool Insert(int32_t id) {
    const std::string_view piece = PieceOf(id);
    const uint64_t h = XXH3_64bits(piece.data(), piece.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{static_cast<uint32_t>(h >> 32), id};
        return true;
      }
      if (s.tag == static_cast<uint32_t>(h >> 32) && PieceOf(s.id) == piece) return false;
    }
  }

  std::optional<int32_t> Find(std::string_view piece) const {
    return FindHashed(piece, XXH3_64bits(piece.data(), piece.size()));
  }

  // Find with the piece's hash computed beforehand (Hash), after Prefetch: loading many tables at
  // start-up, a batch of lookups then waits for its cache misses together instead of one by one.
  static uint64_t Hash(std::string_view piece) { return XXH3_64bits(piece.data(), piece.size()); }
  void Prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }
  std::optional<int32_t> FindHashed(std::string_view piece, uint64_t h) const {
    if (slots_.empty()) return std::nullopt;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return std::nullopt;
      if (s.tag == static_cast<uint32_t>(h >> 32) && PieceOf(s.id) == piece) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the hash
    int32_t id;    // -1: empty
  };
  std::string_view PieceOf(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(*arena_).substr((*offsets_)[i], (*offsets_)[i + 1] - (*offsets_)[i]);
  }
  const std::string* arena_ = nullptr;
  const std::vector<uint32_t>* offsets_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Maps (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };

  MergeTable() = default;
  explicit MergeTable(size_t expected) {
    // Load factor up to 3/4: 280k merges take 8 MiB instead of 16.
    size_t capacity = 16;
    while (capacity * 3 < expected * 4 + 4) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, {0, 0}});
    mask_ = slots_.size() - 1;
  }

  // Prefetches the slot where (left, right) starts its probe (see PieceIndex::Prefetch).
  void Prefetch(int32_t left, int32_t right) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Hash(Key(left, right)) & mask_]);
  }

  // Inserts or overwrites (a pair listed again takes its later rank).
  // REQUIRES: at most `expected` distinct pairs.
  void Put(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == key) {
        slots_[i] = Slot{key, merge};
        return;
      }
    }
  }

  const Merge* Find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative, so no pair has this key
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static uint64_t Hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 32);
  }
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace niels::daemon::text
