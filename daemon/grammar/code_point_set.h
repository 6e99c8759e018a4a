#pragma once
// CodePointSet: a set of Unicode scalar values as sorted, disjoint, non-adjacent closed ranges,
// with a 128-bit map of its ASCII part for the matcher's hot path. Surrogates are never members.
// A value type; immutable once built (Normalize is the only mutator after construction). A set
// holds exactly its ranges: building one from many overlapping ranges keeps no larger buffer.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace niels::daemon::grammar {

struct CodePointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;  // inclusive
  bool operator==(const CodePointRange&) const = default;
};

class CodePointSet {
 public:
  CodePointSet() = default;
  // The ranges may overlap, touch, come in any order and include surrogates; they are normalized.
  explicit CodePointSet(std::vector<CodePointRange> ranges);

  static CodePointSet Single(uint32_t cp) { return CodePointSet({{cp, cp}}); }
  static CodePointSet Any();  // every scalar value

  CodePointSet Complement() const;
  CodePointSet Union(const CodePointSet& other) const;
  // One pass over both range lists: O(ranges of both).
  CodePointSet Minus(const CodePointSet& other) const;

  bool Contains(uint32_t cp) const {
    if (cp < 128) return (ascii_[cp >> 6] >> (cp & 63)) & 1;
    return ContainsSlow(cp);
  }
  // True when some member lies in [lo, hi].
  bool Intersects(uint32_t lo, uint32_t hi) const;
  // True when the sets share a member / every member of `other` is a member of this set. One pass
  // over both range lists: O(ranges of both).
  bool Intersects(const CodePointSet& other) const;
  bool ContainsAll(const CodePointSet& other) const;
  // The largest interval [*lo, *hi] around `cp` on which membership does not change (all members
  // or none), clipped to the interval passed in. O(log ranges).
  void NarrowToConstantAround(uint32_t cp, uint32_t* lo, uint32_t* hi) const;
  bool empty() const { return ranges_.empty(); }
  // The smallest member. REQUIRES: !empty().
  uint32_t Min() const { return ranges_.front().lo; }
  // Number of members (for random choice in tests and the fuzz target).
  uint64_t Size() const;
  // The n-th member in increasing order. REQUIRES: n < Size().
  uint32_t Nth(uint64_t n) const;

  const std::vector<CodePointRange>& ranges() const { return ranges_; }
  bool operator==(const CodePointSet& other) const { return ranges_ == other.ranges_; }

  // GBNF character class text for the set, e.g. `[a-z\x22]` (used by the schema compiler).
  std::string ToGbnfClass() const;

 private:
  bool ContainsSlow(uint32_t cp) const;
  void Normalize();

  std::vector<CodePointRange> ranges_;
  uint64_t ascii_[2] = {0, 0};
};

}  // namespace niels::daemon::grammar
