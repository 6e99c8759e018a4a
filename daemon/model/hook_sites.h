#pragma once
// Hook sites: named points of the one forward pass (forward_step.h) at which a row's activation
// vector can be observed, with TransformerLens' names (proto/PROTOCOL.md, "Activation
// statistics"), and the patterns clients select them by.
//
// In block l (0-based; docs/ARCHITECTURE.md "Model math": h = h + Attention(RMSNorm(h)),
// h = h + MLP(RMSNorm(h))), for one row (one position of one sequence):
//
//   blocks.{l}.hook_resid_pre   [C]  h entering block l: before attn_norm (block 0: the token's
//                                    embedding row, as served)
//   blocks.{l}.hook_attn_out    [C]  the attention's output after wo (heads concatenated, times
//                                    wo^T; no bias in the family), before it is added to h
//   blocks.{l}.hook_resid_mid   [C]  h after the attention is added: before ffn_norm
//   blocks.{l}.mlp.hook_post    [F]  silu(w_gate x (+ b_gate)) * (w_up x (+ b_up)) with
//                                    x = RMSNorm(h; ffn_norm): the input of w_down
//   blocks.{l}.hook_mlp_out     [C]  w_down(that) (+ b_down), before it is added to h
//   blocks.{l}.hook_resid_post  [C]  h after the MLP is added: the block's output (equal to
//                                    blocks.{l+1}.hook_resid_pre)
//   ln_final.hook_normalized    [C]  h after the last block divided by sqrt(mean(h^2) + eps), BEFORE
//                                    the final norm's weight (TransformerLens' RMSNorm
//                                    hook_normalized); the logits are this times final_norm's
//                                    weight, times lm_head^T
//
// The values are the floats the forward pass computes (f32, whatever the weights' dtype), read
// where they lie; observing copies nothing into the computation and changes no value.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace niels::daemon::model {

// In the order the forward pass reaches them within a block; kLnFinalNormalized after every block.
enum class HookSite : uint8_t {
  kResidPre,
  kAttnOut,
  kResidMid,
  kMlpPost,
  kMlpOut,
  kResidPost,
  kLnFinalNormalized,
};
inline constexpr int kBlockHookSites = 6;  // the sites of every block (all but kLnFinalNormalized)

// "hook_resid_pre", ..., "mlp.hook_post", ...; "ln_final.hook_normalized" for the final site.
std::string_view HookSiteSuffix(HookSite site);
// The full name: "blocks.{layer}.{suffix}", or "ln_final.hook_normalized" (layer ignored).
std::string HookSiteName(HookSite site, int64_t layer);
// The number of sites of a model of `layers` blocks: kBlockHookSites x layers + 1.
inline int64_t HookSiteCount(int64_t layers) { return kBlockHookSites * layers + 1; }

// A set of (site, layer) pairs of one model. The final site's layer is -1.
class HookSelection {
 public:
  HookSelection() = default;
  explicit HookSelection(int64_t layers) : layers_(layers), on_(static_cast<size_t>(HookSiteCount(layers))) {}

  int64_t layers() const { return layers_; }
  bool empty() const { return count_ == 0; }
  int64_t count() const { return count_; }
  bool Has(HookSite site, int64_t layer) const { return !on_.empty() && on_[Index(site, layer)] != 0; }
  void Add(HookSite site, int64_t layer);
  // Every selected pair in forward order: blocks by layer, each block's sites in HookSite order, the
  // final site last.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (int64_t l = 0; l < layers_; ++l) {
      for (int s = 0; s < kBlockHookSites; ++s) {
        if (on_[Index(static_cast<HookSite>(s), l)] != 0) fn(static_cast<HookSite>(s), l);
      }
    }
    if (!on_.empty() && on_.back() != 0) fn(HookSite::kLnFinalNormalized, int64_t{-1});
  }
  // Dense index in [0, HookSiteCount(layers)): layer x kBlockHookSites + site; the final site last.
  size_t Index(HookSite site, int64_t layer) const {
    return site == HookSite::kLnFinalNormalized ? on_.size() - 1
                                                : static_cast<size_t>(layer * kBlockHookSites + static_cast<int>(site));
  }

 private:
  int64_t layers_ = 0;
  int64_t count_ = 0;
  std::vector<uint8_t> on_;
};

// Limits of one request's site patterns (common/budgets.h has the numbers).
// Parses `patterns` for a model of `layers` blocks into the union of what they select.
//
// A pattern without `*` is one site's exact name; its layer written in decimal without leading
// zeros. A pattern with `*` selects every site name it matches, `*` matching any run of characters,
// dots included ("blocks.*.hook_resid_post", "blocks.3.*", "*"). Errors, all before anything is
// selected: more than kProbeSitePatternsLimit patterns (budget probe_site_patterns), one longer
// than kProbeSitePatternBytesLimit bytes (probe_site_pattern_bytes), INVALID_ARGUMENT naming
// "<field>[i]" for an empty pattern, an unknown site, a layer out of range and a glob that matches
// no site; more than kProbeSitesLimit sites selected (probe_sites).
//
// Work: a glob is matched against every name, each match at most (|pattern| + 1) x (|name| + 1)
// steps (common/name_glob.h); `work`, when given, receives the steps taken, which never exceed
// HookPatternWorkBound(patterns, layers).
common::StatusOr<HookSelection> ParseHookSites(std::span<const std::string> patterns, int64_t layers,
                                               std::string_view field, uint64_t* work = nullptr);
uint64_t HookPatternWorkBound(std::span<const std::string> patterns, int64_t layers);

// Receives one row's activation at the sites it selects. Called by ForwardStep::Run on the thread
// that calls Run, after the values at a site are computed for every row of the step and before
// the next operation reads them, for each row of its sequence in position order; `values` is valid
// only during the call. It must not throw (the step is half done) and must not call into the model.
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // What it observes; the step reads it once per Run. Its layers must be the model's.
  virtual const HookSelection& sites() const = 0;
  // site at `layer` (-1 for kLnFinalNormalized) of the row at `position` of its sequence.
  virtual void Observe(HookSite site, int64_t layer, int64_t position, std::span<const float> values) = 0;
};

}  // namespace niels::daemon::model
