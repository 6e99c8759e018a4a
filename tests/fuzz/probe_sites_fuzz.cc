// Fuzz target: the hook-site patterns of an activation probe (daemon/model/hook_sites.h,
// ParseHookSites), the client's ProbeSpec.sites.
//
// Input: 1 byte, the model's blocks (1 + byte % 64; byte 255: 200 blocks, past the site limit for
// "*"), then the patterns, separated by '\n' (at most 24 of them, so the pattern-count limit is
// reached).
// Invariants: a refusal is INVALID_ARGUMENT naming the field ("sites" or "sites[i]"); a refusal for
// too many patterns or a too long one iff the input has them; an accepted selection holds exactly
// the sites whose names equal a pattern without `*` or match a pattern with `*` under an
// independent glob (dynamic programming), at most kProbeSitesLimit of them, and every pattern
// selects at least one; the parser's work stays within HookPatternWorkBound.
#include <string>
#include <string_view>
#include <vector>

#include "common/budgets.h"
#include "daemon/model/hook_sites.h"
#include "tests/fuzz/fuzz_util.h"

namespace model = niels::daemon::model;

namespace {

// Whether `name` matches `pattern` (`*` any run, dots included), by dynamic programming over
// prefixes: match[j] = pattern[0, i) matches name[0, j).
bool ReferenceGlob(std::string_view pattern, std::string_view name) {
  std::vector<char> match(name.size() + 1, 0), next(name.size() + 1);
  match[0] = 1;
  for (const char c : pattern) {
    if (c == '*') {
      next[0] = match[0];
      for (size_t j = 1; j <= name.size(); ++j) next[j] = match[j] || next[j - 1];
    } else {
      next[0] = 0;
      for (size_t j = 1; j <= name.size(); ++j) next[j] = match[j - 1] && name[j - 1] == c;
    }
    match.swap(next);
  }
  return match[name.size()] != 0;
}

bool Selects(std::string_view pattern, std::string_view name) {
  return pattern.find('*') == std::string_view::npos ? pattern == name : ReferenceGlob(pattern, name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t layer_byte = in.U8();
  const int64_t layers = layer_byte == 255 ? 200 : 1 + layer_byte % 64;
  std::vector<std::string> patterns;
  const std::string_view rest = in.Rest();
  size_t begin = 0;
  while (patterns.size() < 24 && begin <= rest.size() && !rest.empty()) {
    size_t end = rest.find('\n', begin);
    if (end == std::string_view::npos) end = rest.size();
    patterns.emplace_back(rest.substr(begin, end - begin));
    begin = end + 1;
  }
  uint64_t work = 0;
  const auto parsed = model::ParseHookSites(patterns, layers, "sites", &work);
  bool too_many = patterns.size() > niels::common::kProbeSitePatternsLimit, too_long = false;
  for (const std::string& p : patterns) too_long |= p.size() > niels::common::kProbeSitePatternBytesLimit;
  if (!parsed.ok()) {
    const niels::common::Status status = parsed.status();  // a copy: message() refers into it
    FUZZ_CHECK(status.code() == niels::common::StatusCode::kInvalidArgument);
    const std::string& message = status.message();
    FUZZ_CHECK(message.starts_with("sites"));
    FUZZ_CHECK(message.ends_with("(budget probe_site_patterns)") == too_many);
    if (!too_many) {
      FUZZ_CHECK(message.ends_with("(budget probe_site_pattern_bytes)") == too_long);
    }
    FUZZ_CHECK(message.size() < 2048);
    return 0;
  }
  FUZZ_CHECK(!too_many && !too_long);
  FUZZ_CHECK(work <= model::HookPatternWorkBound(patterns, layers));
  const model::HookSelection& selection = *parsed;
  FUZZ_CHECK(selection.layers() == layers);
  FUZZ_CHECK(static_cast<size_t>(selection.count()) <= niels::common::kProbeSitesLimit);
  std::vector<bool> pattern_used(patterns.size());
  int64_t selected = 0;
  const auto check = [&](model::HookSite site, int64_t layer) {
    const std::string name = model::HookSiteName(site, layer);
    bool any = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (Selects(patterns[i], name)) {
        any = true;
        pattern_used[i] = true;
      }
    }
    FUZZ_CHECK(any == selection.Has(site, layer));
    selected += any;
  };
  for (int64_t l = 0; l < layers; ++l) {
    for (int s = 0; s < model::kBlockHookSites; ++s) check(static_cast<model::HookSite>(s), l);
  }
  check(model::HookSite::kLnFinalNormalized, -1);
  FUZZ_CHECK(selected == selection.count());
  for (const bool used : pattern_used) FUZZ_CHECK(used);
  int64_t visited = 0;
  selection.ForEach([&](model::HookSite site, int64_t layer) {
    FUZZ_CHECK(selection.Has(site, layer));
    ++visited;
  });
  FUZZ_CHECK(visited == selection.count());
  return 0;
}
