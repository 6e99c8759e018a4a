#pragma once
// SessionStore: the engine's sessions by id, with ownership checks, a session limit and a KV memory
// budget (docs/ARCHITECTURE.md, "Engine: scheduling and batching").
//
// Ownership: a session belongs to the uid that created (or forked) it. Another uid gets
// PERMISSION_DENIED; uid 0 is treated as the owner only when `allow_root`. Listing shows only the
// caller's own sessions (root included).
//
// KV budget: the sum of every session's KvCache::bytes() should stay within `kv_budget_bytes`. Before
// a request grows a session's cache, Reserve() drops the caches of the least recently used *other*
// sessions (their history stays; the next request on them re-prefills) until the expected size fits;
// only when the request alone cannot fit is it refused. Trim() does the same after a request, because
// caches grow in chunks.
//
// Not thread-safe: used only by the engine thread.

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
  uint32_t max_sessions = 64;            // RESOURCE_EXHAUSTED beyond this
  uint64_t kv_budget_bytes = 1ull << 30; // total KV cache bytes of all sessions
  bool allow_root = false;               // uid 0 may use every session
};

class SessionStore {
 public:
  SessionStore(const model::ModelConfig& config, SessionStoreOptions options);
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A new empty session owned by `owner`. RESOURCE_EXHAUSTED when max_sessions exist.
  common::StatusOr<Session*> Create(uint32_t owner);
  // The session `id` if `caller` may use it (and marks it used): NOT_FOUND for an unknown id,
  // PERMISSION_DENIED for another uid's session. The pointer stays valid until Delete().
  common::StatusOr<Session*> Find(const std::string& id, uint32_t caller);
  // A deep copy of session `id`, owned by `caller`. Errors as Find(), plus RESOURCE_EXHAUSTED when
  // max_sessions exist. When the copy's cache would not fit the budget (after dropping other
  // sessions' caches) the fork gets the history only and re-prefills on first use.
  common::StatusOr<Session*> Fork(const std::string& id, uint32_t caller);
  // Removes session `id`. Errors as Find().
  common::Status Delete(const std::string& id, uint32_t caller);
  // The caller's own sessions, oldest first.
  std::vector<const Session*> List(uint32_t caller) const;

  // Makes room for `active` to hold `expected_bytes` of cache: drops LRU caches of other sessions
  // while the total would exceed the budget. RESOURCE_EXHAUSTED (nothing dropped) when
  // expected_bytes alone exceeds the budget.
  common::Status Reserve(const Session* active, uint64_t expected_bytes);
  // Drops LRU caches of sessions other than `active` while the total exceeds the budget.
  void Trim(const Session* active);

  // Admission of a generating request on `session` (KV-budget-aware scheduling): when the request
  // alone exceeds the budget, RESOURCE_EXHAUSTED. When the sessions with running turns (busy ones)
  // already hold or have reserved so much that expected_bytes does not fit beside them, *must_wait
  // is set and nothing changes: retry when a turn ends. Otherwise LRU caches of idle sessions are
  // dropped as needed and the session becomes busy with expected_bytes reserved.
  common::Status Admit(const Session* session, uint64_t expected_bytes, bool* must_wait);
  // Marks a session with a running turn, `reserved_bytes` of cache promised to it. A busy session's
  // cache is never dropped by Reserve(), Trim(), Admit() or Fork() made for other sessions.
  void MarkBusy(const Session* session, uint64_t reserved_bytes) { busy_[session] = reserved_bytes; }
  void ClearBusy(const Session* session) { busy_.erase(session); }
  bool IsBusy(const Session* session) const { return busy_.count(session) != 0; }
  size_t busy_count() const { return busy_.size(); }

  // Bytes a cache of `tokens` positions needs (keys and values, f32, every layer).
  uint64_t BytesForTokens(int64_t tokens) const;

  size_t size() const { return sessions_.size(); }
  uint64_t kv_bytes() const;
  uint32_t max_sessions() const { return options_.max_sessions; }
  uint64_t kv_budget_bytes() const { return options_.kv_budget_bytes; }
  // Caches dropped so far to stay within the budget.
  uint64_t evictions() const { return evictions_; }

 private:
  bool MayUse(const Session& session, uint32_t caller) const;
  std::string UniqueId() const;
  // Drops LRU caches of sessions other than `active` while others + `active_bytes` > budget.
  void EvictFor(const Session* active, uint64_t active_bytes);

  model::ModelConfig config_;
  SessionStoreOptions options_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<const Session*, uint64_t> busy_;  // sessions with a running turn -> reserved bytes
  uint64_t tick_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace niels::daemon::engine
