#pragma once
// DurableStore: everything nielsd keeps in its state directory, behind one object the engine uses
// (docs/ARCHITECTURE.md, "Durable sessions"): the session database (session_db.h), the KV spill
// files (kv_spill_store.h), this model's fingerprint, and a maintenance thread.
//
// Layout of the state directory: sessions.db (+ -wal, -shm), kv/<session id>.kv.
//
// Policies kept here:
// - Stored sessions per user: Create() beyond `max_stored_sessions_per_uid` first deletes that
//   user's least recently used session that is not loaded in memory (like a journal that vacuums
//   its oldest files), so a daily niels-chat user never hits a wall; other users are never touched.
// - Expiry: the maintenance thread deletes sessions unused for `session_ttl_s`, except the ones the
//   engine has loaded (MarkLoaded), whose expiry the engine does itself; the engine collects the
//   ids with TakeExpired(). A delete re-checks the last use inside its transaction, so a session the
//   engine touched meanwhile survives.
// - Checkpoints: the engine's connection never checkpoints the WAL (so a commit never pays for
//   one); the maintenance thread does, passively, every interval.
// - Touch(): the engine records uses of a loaded session at most every touch_slack_s() (an hour,
//   less for short TTLs), so a quick request is not a disk write, yet no session in use can look
//   expired in the database.
//
// Threading: every method except MarkLoaded/MarkUnloaded/TakeExpired/counters runs on one thread
// (the engine thread); those four are thread-safe. The maintenance thread has its own connection.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/owner.h"
#include "common/status.h"
#include "daemon/state/kv_spill_store.h"
#include "daemon/state/session_db.h"

namespace niels::daemon::state {

struct DurableStoreOptions {
  std::filesystem::path dir;                      // the state directory (PrepareStateDir done)
  std::string model_fingerprint;                  // ModelFingerprint of the served model
  std::string model_name;
  bool sync_commits = false;                      // SessionDbOptions::sync_commits
  uint64_t max_db_bytes = 0;                      // SessionDbOptions::max_bytes (0 = no limit)
  uint64_t kv_disk_budget_bytes = 2048ull << 20;  // KV spill files in all
  double session_ttl_s = 30.0 * 86400;            // 0 = sessions never expire
  uint32_t max_stored_sessions_per_uid = 1024;
  double maintenance_interval_s = 0;              // 0 = ttl/4, within [0.05 s, 60 s]
};

class DurableStore {
 public:
  // Opens the database (moving an unreadable one aside, see session_db.h) and the spill directory
  // (dropping files of sessions that no longer exist) and starts the maintenance thread.
  static common::StatusOr<std::unique_ptr<DurableStore>> Open(DurableStoreOptions options);
  ~DurableStore();  // stops the maintenance thread
  DurableStore(const DurableStore&) = delete;
  DurableStore& operator=(const DurableStore&) = delete;

  // A new session (CreateSession, ForkSession), making room under the per-user limit first; the
  // ids deleted for it are appended to `evicted` (their spill files are gone too).
  common::Status Create(const StoredSession& session, std::vector<std::string>* evicted);
  // A committed turn or a reset: the new history and last use, in one transaction.
  common::Status Commit(const std::string& id, const StoredHistory& history, double now_unix_s);
  common::Status Touch(const std::string& id, double now_unix_s);
  // Removes the session and its spill file.
  common::Status Delete(const std::string& id);
  common::StatusOr<std::optional<StoredSession>> Load(const std::string& id);
  common::StatusOr<std::optional<SessionSummary>> Summary(const std::string& id);
  common::StatusOr<std::vector<SessionSummary>> List(common::OwnerId owner);
  common::StatusOr<int64_t> Count();

  // Whether a stored session belongs to the model this daemon serves.
  bool IsThisModel(const SessionSummary& summary) const {
    return summary.model_fingerprint == options_.model_fingerprint;
  }
  double touch_slack_s() const;

  // Loaded sessions are left to the engine's own expiry. Thread-safe.
  void MarkLoaded(const std::string& id);
  void MarkUnloaded(const std::string& id);
  // Ids the maintenance thread deleted since the last call. Thread-safe.
  std::vector<std::string> TakeExpired();

  KvSpillStore& spill() { return *spill_; }
  const DurableStoreOptions& options() const { return options_; }
  const std::filesystem::path& db_path() const { return db_->path(); }
  uint64_t commits() const { return commits_.load(); }

 private:
  DurableStore(DurableStoreOptions options, std::unique_ptr<SessionDb> db, std::unique_ptr<SessionDb> maintenance_db,
               std::unique_ptr<KvSpillStore> spill);
  void MaintenanceLoop();
  void RunMaintenance();
  bool IsLoaded(const std::string& id) const;

  const DurableStoreOptions options_;
  std::unique_ptr<SessionDb> db_;              // the engine thread's connection
  std::unique_ptr<SessionDb> maintenance_db_;  // the maintenance thread's connection
  std::unique_ptr<KvSpillStore> spill_;
  std::atomic<uint64_t> commits_{0};

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::set<std::string> loaded_;
  std::vector<std::string> expired_;
  std::thread maintenance_;
};

}  // namespace niels::daemon::state
