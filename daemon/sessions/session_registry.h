#pragma once
// SessionRegistry: the sessions by id, who owns them, how many each user may hold, and (with durable
// sessions) the state database behind them (docs/ARCHITECTURE.md, "Sessions and the KV cache" and
// "Durable sessions"). The KV memory their caches use is KvBudget's (kv_budget.h).
//
// Ownership: a session belongs to the owner that created (or forked) it: a uid, or an API-key
// principal of the HTTP front (common/owner.h). Another owner gets PERMISSION_DENIED; uid 0 is
// treated as the owner only when `allow_root`. Listing shows only the
// caller's own sessions (root included).
//
// Limits: at most `max_sessions` sessions in all and `max_sessions_per_uid` per owner, so one user
// (or many leaked niels-chat sessions of one user) cannot lock everyone else out of CreateSession.
// ExpireIdle() removes sessions unused for longer than a timeout (the engine calls it periodically).
// A busy session (Session::busy(): a running turn writes it) is never unloaded, expired or erased.
//
// Durable sessions, when constructed with a state::DurableStore: every session is also in the state
// database. Sessions in memory are "loaded"; a stored session is loaded by the first Find() that
// names it (history only; its KV is read back from a spill file or recomputed) and unloaded again
// when idle for the idle timeout or when a loaded-session limit needs room (then the limits above
// count loaded sessions and never refuse while an idle one can be unloaded). Create, Fork, Commit,
// Reset and Delete write through to the database before they return; a failed write leaves the
// session as it was. A stored session of another model is listed, refused by Find()
// (INVALID_ARGUMENT) and may be deleted. An unloaded session's cache goes through the KvSpiller.
//
// Not thread-safe: used only by the engine thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/owner.h"
#include "common/status.h"
#include "daemon/model/kv_pool.h"
#include "daemon/sessions/kv_spill.h"
#include "daemon/sessions/session.h"
#include "daemon/state/durable_store.h"

namespace niels::daemon::sessions {

// How many sessions may be in memory, and whether root may use everyone's (nielsd's flags).
struct SessionLimits {
  uint32_t max_sessions = 1024;        // RESOURCE_EXHAUSTED beyond this, all owners together
  uint32_t max_sessions_per_uid = 64;  // RESOURCE_EXHAUSTED beyond this for one owner
  bool allow_root = false;             // uid 0 may use every session
};

// What ListSessions/GetSession report about a session, loaded or only stored.
struct SessionView {
  std::string id;
  int64_t length = 0;
  int64_t cached_tokens = 0;
  int64_t kv_bytes = 0;
  int64_t kv_own_blocks = 0;     // blocks only this session holds
  int64_t kv_shared_blocks = 0;  // blocks shared with other sessions or forks
  int32_t turns = 0;
  bool has_system_prompt = false;
  std::string system_prompt_text;
  double created_unix_s = 0;
  double last_used_unix_s = 0;
  bool other_model = false;  // stored by another model (never loaded)
  std::string model_name;    // "" for a loaded session (this daemon's model)
};
SessionView ViewOf(const Session& session);

class SessionRegistry {
 public:
  using Loaded = std::map<std::string, std::unique_ptr<Session>>;

  // Sessions' caches take blocks from `pool`. `spiller` and `durable` (optional: null keeps sessions
  // in memory only) must outlive the registry.
  SessionRegistry(std::shared_ptr<model::KvPool> pool, SessionLimits limits, KvSpiller& spiller,
                  state::DurableStore* durable = nullptr);
  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;

  // A new session owned by `owner`, with `system_ids` (encoded from `system_text`) as its system
  // prompt when `system_text` is set (without it the session is empty and `system_ids` must be
  // empty). RESOURCE_EXHAUSTED when max_sessions exist, or when `owner`
  // already has max_sessions_per_uid (durable: when no idle loaded session can make room), or when
  // the database cannot take it.
  common::StatusOr<Session*> Create(common::OwnerId owner, const std::optional<std::string>& system_text = std::nullopt,
                                    std::vector<int32_t> system_ids = {});
  // The session `id` if `caller` may use it (and marks it used): NOT_FOUND for an unknown id,
  // PERMISSION_DENIED for another uid's session. The pointer stays valid until Delete().
  common::StatusOr<Session*> Find(const std::string& id, common::OwnerId caller);
  // A copy of session `id`, owned by `caller`, sharing its cache's blocks (no KV copy). Errors as
  // Find(), plus RESOURCE_EXHAUSTED as Create().
  common::StatusOr<Session*> Fork(const std::string& id, common::OwnerId caller);
  // Removes session `id` (a stored session of another model too). Errors as Find().
  common::Status Delete(const std::string& id, common::OwnerId caller);
  // The caller's own sessions (durable: loaded and stored), oldest first.
  common::StatusOr<std::vector<SessionView>> List(common::OwnerId caller) const;
  // Ephemeral: deletes every idle session last used before `cutoff`. Durable: unloads them (they
  // stay stored). Returns how many.
  size_t ExpireIdle(std::chrono::steady_clock::time_point cutoff);
  // Durable: deletes loaded idle sessions last used before `cutoff_unix_s` (the session TTL) and
  // forgets those the DurableStore expired in the background. Returns how many were deleted here.
  size_t ExpireStored(double cutoff_unix_s);

  // Durable: writes the session's history as it is now (a committed turn). The caller restores the
  // session when this fails (RESOURCE_EXHAUSTED when the disk or database is full). OK when
  // ephemeral.
  common::Status Commit(Session& session);
  // Back to the system prompt alone, durably; on a failed write the session is unchanged.
  common::Status Reset(Session& session);
  // Session::Rewind(keep, length), stored (durable) before it returns; on a failed store the
  // session is as it was.
  common::Status Rewind(Session& session, size_t keep, int64_t length);

  bool durable() const { return durable_ != nullptr; }
  state::DurableStore* durable_store() const { return durable_; }
  const SessionLimits& limits() const { return limits_; }
  // Sessions in memory (durable: loaded ones), by id.
  const Loaded& loaded() const { return sessions_; }
  size_t size() const { return sessions_.size(); }
  model::KvPool& pool() { return *pool_; }
  const model::KvPool& pool() const { return *pool_; }

 private:
  bool MayUse(common::OwnerId owner, common::OwnerId caller) const;
  // OK, or RESOURCE_EXHAUSTED when one more session for `owner` would break a session limit.
  common::Status CheckRoomFor(common::OwnerId owner) const;
  std::string UniqueId() const;
  // Durable: unloads idle sessions (least recently used first; `owner`'s own first when it is at
  // its limit) until one more may be loaded. Ephemeral: CheckRoomFor.
  common::Status MakeRoomFor(common::OwnerId owner);
  // Takes an idle session out of memory (durable only; it stays stored), spilling its cache.
  void Unload(Session* session);
  // Removes a loaded session from memory (and the per-uid count).
  void Erase(const std::string& id);
  // Adds a session to memory (and the per-uid count); marks it loaded for the DurableStore.
  Session* Insert(std::unique_ptr<Session> session);
  // Loads stored session `id` for `caller`. Errors as Find().
  common::StatusOr<Session*> Load(const std::string& id, common::OwnerId caller);
  // Durable: records a use in the database when the stored one is older than the touch slack.
  // False when the session no longer exists there (expired meanwhile).
  bool TouchStored(Session& session);

  std::shared_ptr<model::KvPool> pool_;
  SessionLimits limits_;
  KvSpiller& spiller_;
  state::DurableStore* durable_ = nullptr;
  Loaded sessions_;
  std::map<common::OwnerId, uint32_t> sessions_per_uid_;  // owner -> number of loaded sessions
  uint64_t tick_ = 0;
};

}  // namespace niels::daemon::sessions
