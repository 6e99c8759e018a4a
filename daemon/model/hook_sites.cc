#include "daemon/model/hook_sites.h"

#include <array>
#include <charconv>

#include <fmt/format.h>

#include "common/budgets.h"
#include "common/name_glob.h"

namespace niels::daemon::model {
namespace {

constexpr std::array<std::string_view, kBlockHookSites + 1> kSuffixes = {
    "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "mlp.hook_post",
    "hook_mlp_out",   "hook_resid_post", "ln_final.hook_normalized",
};

constexpr std::string_view kSiteList =
    "blocks.{l}.hook_resid_pre, blocks.{l}.hook_attn_out, blocks.{l}.hook_resid_mid, blocks.{l}.mlp.hook_post, "
    "blocks.{l}.hook_mlp_out, blocks.{l}.hook_resid_post, ln_final.hook_normalized";

// Up to 160 bytes of a client's pattern for a message (the limit check comes first anyway).
std::string_view Excerpt(std::string_view s) { return s.substr(0, 160); }

// Calls fn(site, layer, name) for every site of a model of `layers` blocks, in forward order; stops
// when fn returns false.
template <typename Fn>
void ForEachSite(int64_t layers, Fn&& fn) {
  std::string name;
  for (int64_t l = 0; l < layers; ++l) {
    for (int s = 0; s < kBlockHookSites; ++s) {
      const auto site = static_cast<HookSite>(s);
      name = HookSiteName(site, l);
      if (!fn(site, l, std::string_view(name))) return;
    }
  }
  fn(HookSite::kLnFinalNormalized, int64_t{-1}, kSuffixes[kBlockHookSites]);
}

// The site an exact name names: OK with the pair, or INVALID_ARGUMENT naming `where`.
common::Status ExactSite(std::string_view pattern, int64_t layers, const std::string& where, HookSite* site,
                         int64_t* layer) {
  if (pattern == kSuffixes[kBlockHookSites]) {
    *site = HookSite::kLnFinalNormalized;
    *layer = -1;
    return common::Status::Ok();
  }
  constexpr std::string_view kBlocks = "blocks.";
  const auto unknown = [&] {
    return common::Status::InvalidArgument(
        fmt::format("{}: unknown hook site '{}' (the sites: {}; * matches any run of characters)", where,
                    Excerpt(pattern), kSiteList));
  };
  if (!pattern.starts_with(kBlocks)) return unknown();
  std::string_view rest = pattern.substr(kBlocks.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return unknown();
  const std::string_view digits = rest.substr(0, dot), suffix = rest.substr(dot + 1);
  bool known_suffix = false;
  for (int s = 0; s < kBlockHookSites; ++s) {
    if (suffix == kSuffixes[s]) {
      *site = static_cast<HookSite>(s);
      known_suffix = true;
    }
  }
  if (!known_suffix) return unknown();
  if (digits.find_first_not_of("0123456789") != std::string_view::npos || (digits.size() > 1 && digits[0] == '0')) {
    return unknown();  // not a decimal layer without leading zeros
  }
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || value >= static_cast<uint64_t>(layers)) {
    return common::Status::InvalidArgument(fmt::format(
        "{}: layer {} of '{}' is out of range (the model has {} blocks, 0..{})", where, Excerpt(digits),
        Excerpt(pattern), layers, layers - 1));
  }
  *layer = static_cast<int64_t>(value);
  return common::Status::Ok();
}

}  // namespace

std::string_view HookSiteSuffix(HookSite site) { return kSuffixes[static_cast<size_t>(site)]; }

std::string HookSiteName(HookSite site, int64_t layer) {
  if (site == HookSite::kLnFinalNormalized) return std::string(kSuffixes[kBlockHookSites]);
  return fmt::format("blocks.{}.{}", layer, HookSiteSuffix(site));
}

void HookSelection::Add(HookSite site, int64_t layer) {
  uint8_t& on = on_[Index(site, layer)];
  count_ += on == 0;
  on = 1;
}

uint64_t HookPatternWorkBound(std::span<const std::string> patterns, int64_t layers) {
  uint64_t names = 0;  // sum over the names of (|name| + 1)
  ForEachSite(layers, [&](HookSite, int64_t, std::string_view name) {
    names += name.size() + 1;
    return true;
  });
  uint64_t bound = 0;
  for (const std::string& p : patterns) {
    if (p.find('*') != std::string::npos) bound += (p.size() + 1) * names;
  }
  return bound;
}

common::StatusOr<HookSelection> ParseHookSites(std::span<const std::string> patterns, int64_t layers,
                                               std::string_view field, uint64_t* work) {
  if (patterns.size() > common::kProbeSitePatternsLimit) {
    return common::Refuse(common::BudgetId::kProbeSitePatterns,
                          fmt::format("{}: {} patterns (the limit is {})", field, patterns.size(),
                                      common::kProbeSitePatternsLimit));
  }
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (patterns[i].size() > common::kProbeSitePatternBytesLimit) {
      return common::Refuse(common::BudgetId::kProbeSitePatternBytes,
                            fmt::format("{}[{}]: {} bytes (the limit is {})", field, i, patterns[i].size(),
                                        common::kProbeSitePatternBytesLimit));
    }
  }
  HookSelection selection(layers);
  uint64_t steps = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& pattern = patterns[i];
    const std::string where = fmt::format("{}[{}]", field, i);
    if (pattern.empty()) return common::Status::InvalidArgument(where + ": empty site name");
    if (pattern.find('*') == std::string::npos) {
      HookSite site{};
      int64_t layer = 0;
      NIELS_RETURN_IF_ERROR(ExactSite(pattern, layers, where, &site, &layer));
      selection.Add(site, layer);
      continue;
    }
    bool any = false;
    ForEachSite(layers, [&](HookSite site, int64_t layer, std::string_view name) {
      if (common::NameGlobMatches(pattern, name, &steps)) {
        selection.Add(site, layer);
        any = true;
      }
      return true;
    });
    if (!any) {
      return common::Status::InvalidArgument(fmt::format(
          "{}: '{}' matches no hook site of this model (the sites: {}, l in 0..{}; * matches any run of characters)",
          where, Excerpt(pattern), kSiteList, layers - 1));
    }
  }
  if (work != nullptr) *work = steps;
  if (static_cast<size_t>(selection.count()) > common::kProbeSitesLimit) {
    return common::Refuse(common::BudgetId::kProbeSites,
                          fmt::format("{}: {} hook sites selected (the limit is {})", field, selection.count(),
                                      common::kProbeSitesLimit));
  }
  return selection;
}

}  // namespace niels::daemon::model
