#include "daemon/grammar/code_point_set.h"

#include <algorithm>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

CodePointSet::CodePointSet(std::vector<CodePointRange> ranges) : ranges_(std::move(ranges)) { Normalize(); }

CodePointSet CodePointSet::Any() { return CodePointSet({{0, kMaxCodePoint}}); }

void CodePointSet::Normalize() {
  // Split around the surrogates and clip to the scalar values.
  std::vector<CodePointRange> split;
  split.reserve(ranges_.size() + 1);
  for (CodePointRange r : ranges_) {
    if (r.lo > r.hi || r.lo > kMaxCodePoint) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo < 0xD800 && r.hi >= 0xD800) {
      split.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
    } else {
      split.push_back(r);
    }
  }
  std::sort(split.begin(), split.end(), [](auto a, auto b) { return a.lo < b.lo; });
  // Merge overlapping or adjacent ranges in place (0xD7FF and 0xE000 stay apart; nothing lies
  // between), then keep exactly the merged ranges: the input may have been far larger than the set
  // (a union of many copies of one class), and its capacity must not stay with the set.
  size_t kept = 0;
  for (const CodePointRange& r : split) {
    if (kept > 0 && r.lo <= split[kept - 1].hi + 1) {
      split[kept - 1].hi = std::max(split[kept - 1].hi, r.hi);
    } else {
      split[kept++] = r;
    }
  }
  ranges_ = std::vector<CodePointRange>(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(kept));
  ascii_[0] = ascii_[1] = 0;
  for (const CodePointRange& r : ranges_) {
    for (uint32_t c = r.lo; c <= std::min<uint32_t>(r.hi, 127); ++c) ascii_[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

CodePointSet CodePointSet::Complement() const {
  std::vector<CodePointRange> out;
  uint32_t next = 0;
  for (const CodePointRange& r : ranges_) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return CodePointSet(std::move(out));
}

CodePointSet CodePointSet::Union(const CodePointSet& other) const {
  std::vector<CodePointRange> all = ranges_;
  all.insert(all.end(), other.ranges_.begin(), other.ranges_.end());
  return CodePointSet(std::move(all));
}

CodePointSet CodePointSet::Minus(const CodePointSet& other) const {
  // One pass over both sorted range lists.
  std::vector<CodePointRange> out;
  size_t j = 0;
  const std::vector<CodePointRange>& cut = other.ranges_;
  for (CodePointRange r : ranges_) {
    while (j < cut.size() && cut[j].hi < r.lo) ++j;
    uint32_t lo = r.lo;
    size_t k = j;
    bool open = true;
    for (; k < cut.size() && cut[k].lo <= r.hi; ++k) {
      if (cut[k].lo > lo) out.push_back({lo, cut[k].lo - 1});
      if (cut[k].hi >= r.hi) {
        open = false;
        break;
      }
      lo = cut[k].hi + 1;
    }
    if (open) out.push_back({lo, r.hi});
  }
  CodePointSet result;
  result.ranges_ = std::move(out);
  for (const CodePointRange& r : result.ranges_) {
    for (uint32_t c = r.lo; c <= std::min<uint32_t>(r.hi, 127); ++c) result.ascii_[c >> 6] |= uint64_t{1} << (c & 63);
  }
  return result;
}

bool CodePointSet::Intersects(const CodePointSet& other) const {
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const CodePointRange& a = ranges_[i];
    const CodePointRange& b = other.ranges_[j];
    if (a.hi < b.lo) {
      ++i;
    } else if (b.hi < a.lo) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

bool CodePointSet::ContainsAll(const CodePointSet& other) const {
  size_t i = 0;
  for (const CodePointRange& b : other.ranges_) {
    while (i < ranges_.size() && ranges_[i].hi < b.lo) ++i;
    if (i == ranges_.size() || ranges_[i].lo > b.lo || ranges_[i].hi < b.hi) return false;
  }
  return true;
}

bool CodePointSet::ContainsSlow(uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](uint32_t v, const CodePointRange& r) { return v < r.lo; });
  return it != ranges_.begin() && cp <= std::prev(it)->hi;
}

bool CodePointSet::Intersects(uint32_t lo, uint32_t hi) const {
  // The first range ending at or after lo.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                             [](const CodePointRange& r, uint32_t v) { return r.hi < v; });
  return it != ranges_.end() && it->lo <= hi;
}

void CodePointSet::NarrowToConstantAround(uint32_t cp, uint32_t* lo, uint32_t* hi) const {
  // The first range starting after cp; the one before it holds cp or ends before it.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](uint32_t v, const CodePointRange& r) { return v < r.lo; });
  uint32_t from = 0, to = UINT32_MAX;
  if (it != ranges_.begin() && cp <= std::prev(it)->hi) {
    from = std::prev(it)->lo;
    to = std::prev(it)->hi;
  } else {
    if (it != ranges_.begin()) from = std::prev(it)->hi + 1;
    if (it != ranges_.end()) to = it->lo - 1;
  }
  *lo = std::max(*lo, from);
  *hi = std::min(*hi, to);
}

uint64_t CodePointSet::Size() const {
  uint64_t n = 0;
  for (const CodePointRange& r : ranges_) n += uint64_t{r.hi} - r.lo + 1;
  return n;
}

uint32_t CodePointSet::Nth(uint64_t n) const {
  for (const CodePointRange& r : ranges_) {
    const uint64_t size = uint64_t{r.hi} - r.lo + 1;
    if (n < size) return static_cast<uint32_t>(r.lo + n);
    n -= size;
  }
  return ranges_.empty() ? 0 : ranges_.back().hi;
}

namespace {

void AppendClassChar(uint32_t cp, std::string* out) {
  if (cp < 0x20 || cp == 0x7F || cp == '"' || cp == '\\' || cp == ']' || cp == '-' || cp == '[' ||
      cp == '^') {
    *out += fmt::format("\\x{:02X}", cp);
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp <= 0xFFFF) {
    *out += fmt::format("\\u{:04X}", cp);
  } else {
    *out += fmt::format("\\U{:08X}", cp);
  }
}

}  // namespace

std::string CodePointSet::ToGbnfClass() const {
  std::string out = "[";
  for (const CodePointRange& r : ranges_) {
    AppendClassChar(r.lo, &out);
    if (r.hi != r.lo) {
      if (r.hi != r.lo + 1) out.push_back('-');
      AppendClassChar(r.hi, &out);
    }
  }
  out.push_back(']');
  return out;
}

}  // namespace niels::daemon::grammar
