#pragma once
// Two open-addressing hash tables for the BPE vocabulary, built once at load and read-only after:
// PieceIndex (piece string -> token id, the strings stay in the caller's vector) and MergeTable
// (pair of token ids -> merge rank and merged id). Linear probing, load factor at most 1/2,
// capacities a power of two. Far fewer allocations than std::unordered_map (one array each), which
// matters for a 151k-token vocabulary loaded at start-up. Lookups are safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <xxhash.h>

namespace niels::daemon::text {

inline size_t TableCapacityFor(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  return capacity;
}

// Maps pieces[id] -> id for the ids inserted. Holds a pointer to `pieces`, which must outlive it and
// not change.
class PieceIndex {
 public:
  PieceIndex() = default;
  PieceIndex(const std::vector<std::string>* pieces, size_t expected) : pieces_(pieces) {
    slots_.assign(TableCapacityFor(expected), Slot{0, -1});
    mask_ = slots_.size() - 1;
  }

  // Inserts id unless its piece is already present (the first id keeps it). Returns whether it did.
  // REQUIRES: fewer than capacity/2 ids inserted (the `expected` of the constructor).
  bool Insert(int32_t id) {
    const std::string& piece = (*pieces_)[static_cast<size_t>(id)];
    const uint64_t h = XXH3_64bits(piece.data(), piece.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{static_cast<uint32_t>(h >> 32), id};
        return true;
      }
      if (s.tag == static_cast<uint32_t>(h >> 32) && (*pieces_)[static_cast<size_t>(s.id)] == piece) return false;
    }
  }

  std::optional<int32_t> Find(std::string_view piece) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = XXH3_64bits(piece.data(), piece.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return std::nullopt;
      if (s.tag == static_cast<uint32_t>(h >> 32) && (*pieces_)[static_cast<size_t>(s.id)] == piece) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the hash
    int32_t id;    // -1: empty
  };
  const std::vector<std::string>* pieces_ = nullptr;
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
    slots_.assign(TableCapacityFor(expected), Slot{kEmpty, {0, 0}});
    mask_ = slots_.size() - 1;
  }

  // Inserts or overwrites (a pair listed again takes its later rank).
  // REQUIRES: fewer than capacity/2 distinct pairs.
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
