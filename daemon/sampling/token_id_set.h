#pragma once
// TokenIdSet: a set of token ids (a request's banned ids, its stop ids) built once per request, so
// that the generation loop never scans the list the client sent. The distinct ids are kept
// ascending in a vector: Contains is a binary search, at most floor(log2(n)) + 1 comparisons for n
// distinct ids; building costs O(m) comparisons for m ids already ascending (what
// handlers::SamplingFromProto hands on), O(m log m) otherwise, and n x 4 bytes.
// A value type; immutable after construction; any thread.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace niels::daemon::sampling {

class TokenIdSet {
 public:
  TokenIdSet() = default;
  // Any ids, in any order, repeated or not (out-of-range ids are kept as they are; callers validate).
  explicit TokenIdSet(std::span<const int32_t> ids);
  TokenIdSet(std::initializer_list<int32_t> ids) : TokenIdSet(std::span<const int32_t>(ids.begin(), ids.size())) {}

  bool Contains(int32_t id) const;
  // The distinct ids, ascending.
  std::span<const int32_t> ids() const { return ids_; }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace niels::daemon::sampling
