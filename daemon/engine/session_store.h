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
// re-attaches whatever of its blocks the pool still has, or reads its spill file back): victims are
// taken first from owners holding more than an equal share of the pool's blocks, least recently
// used first, so one user cycling through many sessions evicts their own caches before anyone
// else's. A session with a running turn (busy) is never a victim, and admission (Admit) keeps the
// blocks that running turns may need within the pool, so a running turn never runs out. Whoever
// writes a session's cache must mark it busy first (the engine does for every turn and for a new
// session's system prompt): blocks are taken while it writes, and an idle session's cache may be
// dropped to supply them.
//
// Durable sessions (docs/ARCHITECTURE.md, "Durable sessions"), when constructed with a
// state::DurableStore: every session is also in the state database. Sessions in memory are
// "loaded"; a stored session is loaded by the first Find() that names it (history only; its KV is
// read back from a spill file or recomputed) and unloaded again when idle for the idle timeout or
// when a loaded-session limit needs room (then the limits above count loaded sessions and never
// refuse while an idle one can be unloaded). Create, Fork, Commit, Reset and Delete write through
// to the database before they return; a failed write leaves the session as it was. A stored
// session of another model is listed, refused by Find() (INVALID_ARGUMENT) and may be deleted.
// When a cache is evicted under the KV budget it is first written to a spill file if reading it
// back is expected to be faster than recomputing it (both rates measured as the daemon runs).
//
// Not thread-safe: used only by the engine thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/engine/session.h"
#include "daemon/model/config.h"
#include "daemon/model/kv_pool.h"
#include "daemon/state/durable_store.h"

namespace niels::daemon::engine {

struct SessionStoreOptions {
  uint32_t max_sessions = 1024;          // RESOURCE_EXHAUSTED beyond this, all owners together
  uint32_t max_sessions_per_uid = 64;    // RESOURCE_EXHAUSTED beyond this for one owner
  uint64_t kv_budget_bytes = 1ull << 30; // the KV pool of all sessions' caches
  kernels::Dtype kv_dtype = kernels::Dtype::kF32;  // its blocks' element type (f32 or f16)
  bool allow_root = false;               // uid 0 may use every session
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

// Counters of the durable side, for Stats.
struct DurableCounters {
  uint64_t spill_writes = 0;
  uint64_t spill_reads = 0;
  uint64_t spill_read_failures = 0;  // damaged or mismatched files, recomputed instead
};

class SessionStore {
 public:
  // `durable` (optional, must outlive the store) makes sessions durable; null keeps them in memory.
  SessionStore(const model::ModelConfig& config, SessionStoreOptions options,
               state::DurableStore* durable = nullptr);
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A new session owned by `owner`, with `system_ids` (encoded from `system_text`) as its system
  // prompt when `system_text` is set. RESOURCE_EXHAUSTED when max_sessions exist, or when `owner`
  // already has max_sessions_per_uid (durable: when no idle loaded session can make room), or when
  // the database cannot take it.
  common::StatusOr<Session*> Create(uint32_t owner, const std::optional<std::string>& system_text = std::nullopt,
                                    std::vector<int32_t> system_ids = {});
  // The session `id` if `caller` may use it (and marks it used): NOT_FOUND for an unknown id,
  // PERMISSION_DENIED for another uid's session. The pointer stays valid until Delete().
  common::StatusOr<Session*> Find(const std::string& id, uint32_t caller);
  // A copy of session `id`, owned by `caller`, sharing its cache's blocks (no KV copy). Errors as
  // Find(), plus RESOURCE_EXHAUSTED as Create().
  common::StatusOr<Session*> Fork(const std::string& id, uint32_t caller);
  // Removes session `id` (a stored session of another model too). Errors as Find().
  common::Status Delete(const std::string& id, uint32_t caller);
  // The caller's own sessions (durable: loaded and stored), oldest first.
  common::StatusOr<std::vector<SessionView>> List(uint32_t caller) const;
  // Ephemeral: deletes every session (except busy ones) last used before `cutoff`. Durable: unloads
  // them (they stay stored). Returns how many.
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
  // Durable: fills the session's empty cache from its spill file, when one exists and reading it is
  // expected to be faster than recomputing; a damaged or stale file is discarded (the caller then
  // prefills as usual). Call once the session's KV memory is reserved (Admit).
  void RestoreSpilledCache(Session& session);
  // Records a measured prefill rate (tokens in `seconds`), the recompute side of the spill decision.
  void RecordPrefill(int64_t tokens, double seconds);

  bool durable() const { return durable_ != nullptr; }
  state::DurableStore* durable_store() const { return durable_; }
  const DurableCounters& durable_counters() const { return counters_; }

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

  // Sessions in memory (durable: loaded ones).
  size_t size() const { return sessions_.size(); }
  // KV memory in use: the pool's referenced blocks (a shared block counted once).
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
  // The idle session whose cache to drop next (see the file comment), or null when none may be.
  Session* PickVictim() const;
  // The pool's reclaimer: spills (when durable and worth it) and drops one idle session's cache;
  // false when there is none.
  bool DropOneIdleCache();
  std::string UniqueId() const;
  // Durable: unloads idle sessions (least recently used first; `owner`'s own first when it is at
  // its limit) until one more may be loaded. Ephemeral: CheckRoomFor.
  common::Status MakeRoomFor(uint32_t owner);
  // Takes an idle session out of memory (durable only; it stays stored), spilling its cache.
  void Unload(Session* session);
  // Removes a loaded session from memory (and the per-uid count).
  void Erase(const std::string& id);
  // Adds a session to memory (and the per-uid count); marks it loaded for the DurableStore.
  Session* Insert(std::unique_ptr<Session> session);
  // Loads stored session `id` for `caller`. Errors as Find().
  common::StatusOr<Session*> Load(const std::string& id, uint32_t caller);
  // Durable: writes the session's cache to its spill file when that pays off; then drops it.
  void SpillAndDropCache(Session* session);
  // Whether reading `bytes` back is expected to be faster than recomputing `tokens`.
  bool SpillPaysOff(uint64_t bytes, int64_t tokens) const;
  // Durable: records a use in the database when the stored one is older than the touch slack.
  // False when the session no longer exists there (expired meanwhile).
  bool TouchStored(Session& session);

  model::ModelConfig config_;
  SessionStoreOptions options_;
  std::shared_ptr<model::KvPool> pool_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<uint32_t, uint32_t> sessions_per_uid_;  // owner -> number of sessions
  std::map<const Session*, int64_t> busy_;  // sessions with a running turn -> reserved blocks
  uint64_t tick_ = 0;
  uint64_t evictions_ = 0;
  state::DurableStore* durable_ = nullptr;
  DurableCounters counters_;
  double read_bytes_per_s_ = 0;    // measured spill reads (EWMA); 0 = not measured yet
  double prefill_tokens_per_s_ = 0;  // measured prefills (EWMA); 0 = not measured yet
};

}  // namespace niels::daemon::engine
