#pragma once
// SessionStore: the engine's sessions by id, with ownership checks, a session limit and a KV memory
// budget (DESIGN.md sections 5 and 7).
//
// Ownership: a session belongs to the uid that created (or forked) it. Another uid gets
// PERMISSION_DENIED; uid 0 is treated as the owner only when `allow_root`. Listing shows only the
// caller's own sessions (root included).
//
// Limits: at most `max_sessions` sessions in all and `max_sessions_per_uid` per owner, so one user
// (or many leaked niels-chat sessions of one user) cannot lock everyone else out of CreateSession.
// ExpireIdle() deletes sessions unused for longer than a timeout (the engine calls it periodically).
//
// KV budget: the sum of every session's KvCache::bytes() should stay within `kv_budget_bytes`. Before
// a request grows a session's cache, Reserve() drops the caches of least recently used *other*
// sessions (their history stays; the next request on them re-prefills) until the expected size fits;
// only when the request alone cannot fit is it refused. Trim() does the same after a request, because
// caches grow in chunks. Victims are taken first from owners holding more than their fair share of
// the budget (budget / number of owners holding a cache, the requester counted), so one user cycling
// through many sessions evicts their own caches before anyone else's.
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

namespace niels::daemon::engine {

struct SessionStoreOptions {
  uint32_t max_sessions = 1024;          // RESOURCE_EXHAUSTED beyond this, all owners together
  uint32_t max_sessions_per_uid = 64;    // RESOURCE_EXHAUSTED beyond this for one owner
  uint64_t kv_budget_bytes = 1ull << 30; // total KV cache bytes of all sessions
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
  // A deep copy of session `id`, owned by `caller`. Errors as Find(), plus RESOURCE_EXHAUSTED as
  // Create(). When the copy's cache would not fit the budget (after dropping other
  // sessions' caches) the fork gets the history only and re-prefills on first use.
  common::StatusOr<Session*> Fork(const std::string& id, uint32_t caller);
  // Removes session `id`. Errors as Find().
  common::Status Delete(const std::string& id, uint32_t caller);
  // The caller's own sessions, oldest first.
  std::vector<const Session*> List(uint32_t caller) const;
  // Deletes every session (except the busy one) last used before `cutoff`; returns how many.
  size_t ExpireIdle(std::chrono::steady_clock::time_point cutoff);

  // Makes room for `active` to hold `expected_bytes` of cache: drops LRU caches of other sessions
  // while the total would exceed the budget. RESOURCE_EXHAUSTED (nothing dropped) when
  // expected_bytes alone exceeds the budget.
  common::Status Reserve(const Session* active, uint64_t expected_bytes);
  // Drops LRU caches of sessions other than `active` while the total exceeds the budget.
  void Trim(const Session* active);

  // Marks the session being generated on (nullptr: none). Its cache is never dropped by Reserve(),
  // Trim() or Fork() made for other sessions meanwhile.
  void SetBusy(const Session* session) { busy_ = session; }

  // Bytes a cache of `tokens` positions needs (keys and values, f32, every layer).
  uint64_t BytesForTokens(int64_t tokens) const;

  size_t size() const { return sessions_.size(); }
  uint64_t kv_bytes() const;
  uint32_t max_sessions() const { return options_.max_sessions; }
  uint32_t max_sessions_per_uid() const { return options_.max_sessions_per_uid; }
  uint64_t kv_budget_bytes() const { return options_.kv_budget_bytes; }
  // Caches dropped so far to stay within the budget.
  uint64_t evictions() const { return evictions_; }

 private:
  bool MayUse(const Session& session, uint32_t caller) const;
  // OK, or RESOURCE_EXHAUSTED when one more session for `owner` would break a session limit.
  common::Status CheckRoomFor(uint32_t owner) const;
  // The cache to drop next for `active` (see the file comment), or null when none may be dropped.
  Session* PickVictim(const Session* active, uint64_t active_bytes) const;
  std::string UniqueId() const;
  // Drops LRU caches of sessions other than `active` while others + `active_bytes` > budget.
  void EvictFor(const Session* active, uint64_t active_bytes);

  model::ModelConfig config_;
  SessionStoreOptions options_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<uint32_t, uint32_t> sessions_per_uid_;  // owner -> number of sessions
  const Session* busy_ = nullptr;
  uint64_t tick_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace niels::daemon::engine
