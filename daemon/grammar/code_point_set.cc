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
  ranges_.clear();
  for (const CodePointRange& r : split) {
    // Merge overlapping or adjacent ranges (0xD7FF and 0xE000 stay apart; nothing lies between).
    if (!ranges_.empty() && r.lo <= ranges_.back().hi + 1) {
      ranges_.back().hi = std::max(ranges_.back().hi, r.hi);
    } else {
      ranges_.push_back(r);
    }
  }
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
  return other.Union(Complement()).Complement();
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
