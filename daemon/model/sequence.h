#pragma once
// Sequence: a token sequence plus the KV cache of a prefix of it -- what the generation loop
// (daemon/engine/generator.h) runs on and what a chat session (daemon/sessions/session.h) keeps.
// The cache always covers tokens[0, cache.length()); the last sampled id is not cached until the
// next forward feeds it. Not thread-safe.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/model/kv_cache.h"

namespace niels::daemon::model {

struct Sequence {
  std::vector<int32_t> tokens;
  KvCache cache;
  // On a shared pool, reusing and registering prefix blocks in the scope `prefix_root`.
  Sequence(std::shared_ptr<KvPool> pool, uint64_t prefix_root) : cache(std::move(pool), prefix_root) {}
  // With a pool of its own for one context of `config` (tools and tests).
  explicit Sequence(const ModelConfig& config) : cache(config) {}
};

}  // namespace niels::daemon::model
