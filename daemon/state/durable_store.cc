#include "daemon/state/durable_store.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/log.h"

namespace niels::daemon::state {
namespace fs = std::filesystem;

namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr int kExpiryBatch = 256;  // sessions deleted per maintenance transaction

}  // namespace

common::StatusOr<std::unique_ptr<DurableStore>> DurableStore::Open(DurableStoreOptions options) {
  SessionDbOptions db_options;
  db_options.sync_commits = options.sync_commits;
  db_options.max_bytes = options.max_db_bytes;
  db_options.auto_checkpoint = false;
  auto db = SessionDb::Open(options.dir / "sessions.db", db_options);
  if (!db.ok()) return db.status();
  db_options.check_integrity = false;  // the first connection just checked the file
  auto maintenance_db = SessionDb::Open(options.dir / "sessions.db", db_options);
  if (!maintenance_db.ok()) return maintenance_db.status();
  auto spill = KvSpillStore::Open(options.dir / "kv", options.kv_disk_budget_bytes);
  if (!spill.ok()) return spill.status();
  // Spill files of sessions deleted while nielsd was not running (or by a crash before their file).
  SessionDb& engine_db = **db;
  (*spill)->Retain([&](const std::string& id) {
    auto summary = engine_db.Summary(id);
    return summary.ok() && summary->has_value() && (*summary)->model_fingerprint == options.model_fingerprint;
  });
  std::unique_ptr<DurableStore> store(new DurableStore(std::move(options), std::move(db).value(),
                                                       std::move(maintenance_db).value(), std::move(spill).value()));
  store->maintenance_ = std::thread([s = store.get()] { s->MaintenanceLoop(); });
  return store;
}

DurableStore::DurableStore(DurableStoreOptions options, std::unique_ptr<SessionDb> db,
                           std::unique_ptr<SessionDb> maintenance_db, std::unique_ptr<KvSpillStore> spill)
    : options_(std::move(options)), db_(std::move(db)), maintenance_db_(std::move(maintenance_db)),
      spill_(std::move(spill)) {}

DurableStore::~DurableStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
  (void)db_->Checkpoint();
}

double DurableStore::touch_slack_s() const {
  if (options_.session_ttl_s <= 0) return 3600;
  return std::min(3600.0, options_.session_ttl_s / 8);
}

common::Status DurableStore::Create(const StoredSession& session, std::vector<std::string>* evicted) {
  const common::OwnerId owner = session.summary.owner;
  for (;;) {
    auto count = db_->CountOwner(owner);
    if (!count.ok()) return count.status();
    if (*count < options_.max_stored_sessions_per_uid) break;
    auto victim = db_->LeastRecentlyUsed(owner, [this](const std::string& id) { return IsLoaded(id); });
    if (!victim.ok()) return victim.status();
    if (!victim->has_value()) {
      return common::Status::ResourceExhausted(fmt::format(
          "{} has {} sessions in use (--max-stored-sessions-per-uid {}); delete some", common::DescribeOwner(owner), *count,
          options_.max_stored_sessions_per_uid));
    }
    NIELS_RETURN_IF_ERROR(Delete(**victim));
    common::LogInfo("state: deleted session {} of {}, its least recently used, to stay within "
                    "--max-stored-sessions-per-uid {}",
                    **victim, common::DescribeOwner(owner), options_.max_stored_sessions_per_uid);
    if (evicted != nullptr) evicted->push_back(**victim);
  }
  NIELS_RETURN_IF_ERROR(db_->Insert(session));
  ++commits_;
  return common::Status::Ok();
}

common::Status DurableStore::Commit(const std::string& id, const StoredHistory& history, double now_unix_s) {
  NIELS_RETURN_IF_ERROR(db_->SaveHistory(id, history, now_unix_s));
  ++commits_;
  return common::Status::Ok();
}

common::Status DurableStore::Touch(const std::string& id, double now_unix_s) { return db_->Touch(id, now_unix_s); }

common::Status DurableStore::Delete(const std::string& id) {
  spill_->Discard(id);
  NIELS_RETURN_IF_ERROR(db_->Delete(id));
  ++commits_;
  return common::Status::Ok();
}

common::StatusOr<std::optional<StoredSession>> DurableStore::Load(const std::string& id) { return db_->Load(id); }

common::StatusOr<std::optional<SessionSummary>> DurableStore::Summary(const std::string& id) {
  return db_->Summary(id);
}

common::StatusOr<std::vector<SessionSummary>> DurableStore::List(common::OwnerId owner) { return db_->ListOwner(owner); }

common::StatusOr<int64_t> DurableStore::Count() { return db_->CountAll(); }

void DurableStore::MarkLoaded(const std::string& id) {
  std::lock_guard lock(mutex_);
  loaded_.insert(id);
}

void DurableStore::MarkUnloaded(const std::string& id) {
  std::lock_guard lock(mutex_);
  loaded_.erase(id);
}

bool DurableStore::IsLoaded(const std::string& id) const {
  std::lock_guard lock(mutex_);
  return loaded_.count(id) != 0;
}

std::vector<std::string> DurableStore::TakeExpired() {
  std::lock_guard lock(mutex_);
  return std::exchange(expired_, {});
}

void DurableStore::RunMaintenance() {
  if (options_.session_ttl_s > 0) {
    const double cutoff = UnixNow() - options_.session_ttl_s;
    for (;;) {
      auto expired = maintenance_db_->DeleteExpired(cutoff, kExpiryBatch,
                                                    [this](const std::string& id) { return IsLoaded(id); });
      if (!expired.ok()) {
        common::LogWarn("state: expiring old sessions failed: {}", expired.status().ToString());
        break;
      }
      for (const std::string& id : *expired) spill_->Discard(id);
      if (!expired->empty()) {
        common::LogInfo("state: {} session(s) unused for more than --session-ttl deleted", expired->size());
        std::lock_guard lock(mutex_);
        expired_.insert(expired_.end(), expired->begin(), expired->end());
      }
      if (static_cast<int>(expired->size()) < kExpiryBatch) break;
    }
  }
  if (common::Status status = maintenance_db_->Checkpoint(); !status.ok()) {
    common::LogDebug("state: WAL checkpoint: {}", status.ToString());
  }
}

void DurableStore::MaintenanceLoop() {
  double interval = options_.maintenance_interval_s;
  if (interval <= 0) {
    interval = options_.session_ttl_s > 0 ? std::clamp(options_.session_ttl_s / 4, 0.05, 60.0) : 60.0;
  }
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    RunMaintenance();
    lock.lock();
    wake_.wait_for(lock, std::chrono::duration<double>(interval), [this] { return stopping_; });
  }
}

}  // namespace niels::daemon::state
