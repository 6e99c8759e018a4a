#pragma once
// Name patterns as clients write them for tensors and hook sites: `*` matches any run of
// characters, dots included ("model.layers.*.mlp.down_proj.weight" matches every layer's, "blk.1*"
// blk.1.* and blk.10.*, "blocks.*.hook_resid_post" every block's); every other character, `?` and
// `[` included, matches itself.

#include <cstdint>
#include <string_view>

namespace niels::common {

// Whether `name` matches `pattern`. Greedy with one backtrack point (the last `*`), so at most
// (|pattern| + 1) x (|name| + 1) steps; `steps`, when given, has the steps taken added to it.
bool NameGlobMatches(std::string_view pattern, std::string_view name, uint64_t* steps = nullptr);

}  // namespace niels::common
