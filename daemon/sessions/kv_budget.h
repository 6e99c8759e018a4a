#pragma once
// KvBudget: the KV memory of every session's cache -- the shared KvPool (kv_pool.h), sized by
// --kv-budget-mb -- and who may use how much of it (docs/ARCHITECTURE.md, "Sessions and the KV
// cache").
//
// Admission: a turn is admitted only when the blocks it may grow to fit beside what the running
// (busy) turns hold or may grow to (Admit); it then marks its session busy with that reservation,
// so a running turn never runs out of blocks.
//
// Eviction: sessions with the same leading tokens share blocks (a system prompt is stored once; a
// fork shares every block). When the pool needs a block and none is free or merely cached, the budget
// drops the cache of an idle session (its history stays; its next request re-prefills, re-attaches
// whatever of its blocks the pool still has, or reads its spill file back through the KvSpiller):
// victims are taken first from owners holding more than an equal share of the pool's blocks, least
// recently used first, so one user cycling through many sessions evicts their own caches before
// anyone else's. A busy session is never a victim. Whoever writes a session's cache must mark it busy
// first (the engine does for every turn and for a new session's system prompt): blocks are taken
// while it writes, and an idle session's cache may be dropped to supply them.
//
// Not thread-safe: used only by the engine thread.

#include <cstdint>

#include "common/status.h"
#include "daemon/model/kv_pool.h"
#include "daemon/sessions/kv_spill.h"
#include "daemon/sessions/session.h"
#include "daemon/sessions/session_registry.h"

namespace niels::daemon::sessions {

class KvBudget {
 public:
  // Becomes the reclaimer of `registry`'s pool. `registry` and `spiller` must outlive the budget.
  KvBudget(SessionRegistry& registry, KvSpiller& spiller);
  ~KvBudget();  // stops reclaiming
  KvBudget(const KvBudget&) = delete;
  KvBudget& operator=(const KvBudget&) = delete;

  // Reserves KV memory for a turn on `session` that may grow its history to `final_length` tokens
  // (at most T) and marks the session busy with it. RESOURCE_EXHAUSTED when that alone exceeds the
  // budget; *must_wait set (and nothing changed) when the running turns hold or may still take the
  // memory it needs (the pool's capacity is what counts: idle sessions' caches are dropped as
  // blocks are taken).
  common::Status Admit(Session& session, int64_t final_length, bool* must_wait);

  // Blocks a cache of `tokens` positions occupies.
  static int64_t BlocksForTokens(int64_t tokens);

  model::KvPool& pool() { return registry_.pool(); }
  const model::KvPool& pool() const { return registry_.pool(); }
  // KV memory in use: the pool's referenced blocks (a shared block counted once).
  uint64_t used_bytes() const;
  // The budget the pool was sized for (--kv-budget-mb).
  uint64_t budget_bytes() const { return registry_.pool().budget_bytes(); }
  // Caches dropped so far to stay within the budget.
  uint64_t evictions() const { return evictions_; }

 private:
  // The idle session whose cache to drop next (see the file comment), or null when none may be.
  Session* PickVictim() const;
  // The pool's reclaimer: spills (when durable and worth it) and drops one idle session's cache;
  // false when there is none.
  bool DropOneIdleCache();

  SessionRegistry& registry_;
  KvSpiller& spiller_;
  uint64_t evictions_ = 0;
};

}  // namespace niels::daemon::sessions
