#pragma once
// SessionStore: the engine's sessions by id, with ownership checks, a session limit and a KV memory
// budget (docs/ARCHITECTURE.md, "Engine: scheduling and batching").
//
// Ownership: a session belongs to the uid that created (or forked) it. Another uid gets
// PERMISSION_DENIED; uid 0 is treated as the owner only when `allow_root`. Listing shows only the
// caller's own sessions (root included).
//
// Limits: at most `max_sessions` sessions in all and `max_sessions_per_uid` per owner, so one user
// (or many leaked niels-chat sessions of one user) cannot lock everyone else out of CreateSession.
// ExpireIdle() deletes sessions unused for longer than a timeout (the engine calls it periodically).
//
// KV memory: the store owns the KvPool (kv_pool.h) of all sessions' caches, sized by
// `kv_budget_bytes`. Sessions with the same leading tokens share blocks (a system prompt is stored
// once; a fork shares every block). When the pool needs a block and none is free or merely cached,
// the store drops the cache of an idle session (its history stays; its next request re-prefills,
// or re-attaches whatever of its blocks the pool still has): victims are taken first from owners
// holding more than an equal share of the pool's blocks, least recently used first, so one user
// cycling through many sessions evicts their own caches before anyone else's. A session with a
// running turn (busy) is never a victim, and admission (Admit) keeps the blocks that running turns
// may need within the pool, so a running turn never runs out. Whoever writes a session's cache
// must mark it busy first (the engine does for every turn and for a new session's system prompt):
// blocks are taken while it writes, and an idle session's cache may be dropped to supply them.
//
// Not thread-safe: used only by the engine thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/engine/session.h"
#include "daemon/model/config.h"
#include "daemon/model/kv_pool.h"

namespace niels::daemon::engine {

struct SessionStoreOptions {
  uint32_t max_sessions = 1024;          // RESOURCE_EXHAUSTED beyond this, all owners together
  uint32_t max_sessions_per_uid = 64;    // RESOURCE_EXHAUSTED beyond this for one owner
  uint64_t kv_budget_bytes = 1ull << 30; // the KV pool of all sessions' caches
  bool allow_root = false;               // uid 0 may use every session
};

class SessionStore {
 public:
  SessionStore(const model::ModelConfig& config, SessionStoreOptions options);
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A new empty session owned by `owner`. RESOURCE_EXHAUSTED when max_sessions exist, or when
  // `owner` already has max_sessions_per_uid.
  common::StatusOr<Session*> Create(uint32_t owner);
  // The session `id` if `caller` may use it (and marks it used): NOT_FOUND for an unknown id,
  // PERMISSION_DENIED for another uid's session. The pointer stays valid until Delete().
  common::StatusOr<Session*> Find(const std::string& id, uint32_t caller);
  // A copy of session `id`, owned by `caller`, sharing its cache's blocks (no KV copy). Errors as
  // Find(), plus RESOURCE_EXHAUSTED as Create().
  common::StatusOr<Session*> Fork(const std::string& id, uint32_t caller);
  // Removes session `id`. Errors as Find().
  common::Status Delete(const std::string& id, uint32_t caller);
  // The caller's own sessions, oldest first.
  std::vector<const Session*> List(uint32_t caller) const;
  // Deletes every session (except busy ones) last used before `cutoff`; returns how many.
  size_t ExpireIdle(std::chrono::steady_clock::time_point cutoff);

  // Admission of a generating request on `session` that may grow its history to `final_length`
  // tokens: RESOURCE_EXHAUSTED when that alone needs more blocks than the pool has. When the turns
  // already running may need so many blocks that this one does not fit beside them, *must_wait is
  // set and nothing changes: retry when a turn ends. Otherwise the session becomes busy with its
  // blocks reserved (idle sessions' caches are dropped later, as blocks are taken).
  common::Status Admit(const Session* session, int64_t final_length, bool* must_wait);
  // Marks a session with a running turn that reserves `reserved_blocks` blocks. A busy session's
  // cache is never dropped to make room for others.
  void MarkBusy(const Session* session, int64_t reserved_blocks) { busy_[session] = reserved_blocks; }
  void ClearBusy(const Session* session) { busy_.erase(session); }
  bool IsBusy(const Session* session) const { return busy_.count(session) != 0; }
  size_t busy_count() const { return busy_.size(); }

  // Blocks a cache of `tokens` positions occupies.
  int64_t BlocksForTokens(int64_t tokens) const;

  model::KvPool& pool() { return *pool_; }
  const model::KvPool& pool() const { return *pool_; }
  const std::shared_ptr<model::KvPool>& shared_pool() const { return pool_; }

  size_t size() const { return sessions_.size(); }
  // KV memory in use: the pool's referenced blocks (a shared block counted once).
  uint64_t kv_bytes() const;
  uint32_t max_sessions() const { return options_.max_sessions; }
  uint32_t max_sessions_per_uid() const { return options_.max_sessions_per_uid; }
  uint64_t kv_budget_bytes() const { return options_.kv_budget_bytes; }
  // Sessions' caches dropped so far to make room.
  uint64_t evictions() const { return evictions_; }

 private:
  bool MayUse(const Session& session, uint32_t caller) const;
  // OK, or RESOURCE_EXHAUSTED when one more session for `owner` would break a session limit.
  common::Status CheckRoomFor(uint32_t owner) const;
  // The idle session whose cache to drop next (see the file comment), or null when none may be.
  Session* PickVictim() const;
  // The pool's reclaimer: drops one idle session's cache; false when there is none.
  bool DropOneIdleCache();
  std::string UniqueId() const;

  model::ModelConfig config_;
  SessionStoreOptions options_;
  std::shared_ptr<model::KvPool> pool_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<uint32_t, uint32_t> sessions_per_uid_;  // owner -> number of sessions
  std::map<const Session*, int64_t> busy_;  // sessions with a running turn -> reserved blocks
  uint64_t tick_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace niels::daemon::engine
