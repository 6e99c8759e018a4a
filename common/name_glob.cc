#include "common/name_glob.h"

namespace niels::common {

bool NameGlobMatches(std::string_view pattern, std::string_view name, uint64_t* steps) {
  // The last `*` seen and where its match ends: a mismatch after it lets that star take one more
  // character and tries again from there.
  size_t p = 0, n = 0;
  size_t star = std::string_view::npos, star_end = 0;
  uint64_t taken = 0;
  bool matched = true;
  while (n < name.size()) {
    ++taken;
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_end = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++star_end;
    } else {
      matched = false;
      break;
    }
  }
  if (matched) {
    while (p < pattern.size() && pattern[p] == '*') {
      ++p;
      ++taken;
    }
    matched = p == pattern.size();
  }
  if (steps != nullptr) *steps += taken;
  return matched;
}

}  // namespace niels::common
