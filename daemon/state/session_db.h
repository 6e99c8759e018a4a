#pragma once
// SessionDb: the durable session store of nielsd (docs/ARCHITECTURE.md, "Durable sessions"), one
// SQLite database in WAL mode with a versioned schema.
//
// Every mutating call is one transaction: a session is created, forked, has a turn committed, is
// reset, touched or deleted entirely or not at all, whatever happens to the process afterwards.
// With `sync_commits` every transaction is also fsynced (synchronous=FULL: it survives a power
// loss); without it (synchronous=NORMAL, the default) a committed transaction survives any crash of
// nielsd, and a power loss may roll back the last few but never corrupts the file.
//
// Opening: a file SQLite cannot read as a database (corrupt, not a database, unreadable) is not
// silently replaced: it is renamed to "<name>.corrupt-<UTC time>" (with its -wal/-shm files), one
// warning names both paths, and a fresh database is created; Open() reports the moved path. A
// database whose schema is newer than this nielsd knows is refused (INVALID_ARGUMENT), untouched.
// Older schemas are migrated, one transaction per step.
//
// Errors: a full disk (or `max_bytes` reached, via SQLite's max_page_count) is RESOURCE_EXHAUSTED
// and the transaction leaves the database as it was; other failures are INTERNAL.
//
// Threading: one SessionDb is used by one thread at a time. Several SessionDb objects (several
// connections) may use the same file from different threads; writers wait for each other (busy
// timeout 5 s).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/owner.h"
#include "common/status.h"
#include "daemon/state/sqlite.h"
#include "daemon/state/stored_session.h"

namespace niels::daemon::state {

// One schema step: the SQL that takes the database from version `to - 1` to `to`.
struct Migration {
  int to = 0;
  std::string_view sql;
};
// The schema of this nielsd, oldest step first; the last step's `to` is the current version.
const std::vector<Migration>& SchemaMigrations();

struct SessionDbOptions {
  bool sync_commits = false;  // fsync every transaction (synchronous=FULL)
  uint64_t max_bytes = 0;     // 0 = no limit; else RESOURCE_EXHAUSTED once the file would outgrow it
  bool auto_checkpoint = true;  // false: commits never checkpoint the WAL (call Checkpoint() elsewhere)
  bool check_integrity = true;  // run SQLite's quick_check at open (a second connection may skip it)
  // For tests of the migration machinery; empty = SchemaMigrations().
  std::vector<Migration> migrations;
};

class SessionDb {
 public:
  // Opens or creates the database at `path` (see the file comment).
  static common::StatusOr<std::unique_ptr<SessionDb>> Open(const std::filesystem::path& path,
                                                           SessionDbOptions options = {});
  SessionDb(const SessionDb&) = delete;
  SessionDb& operator=(const SessionDb&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Where an unreadable database found by Open() was moved; nullopt when none was.
  const std::optional<std::filesystem::path>& moved_aside() const { return moved_aside_; }
  int schema_version() const { return schema_version_; }

  // Adds a new session (CreateSession, ForkSession). INVALID_ARGUMENT when the history is
  // inconsistent; INTERNAL when the id exists.
  common::Status Insert(const StoredSession& session);
  // Replaces the history of session `id` and sets its last use (a committed turn, a reset).
  // NOT_FOUND when it does not exist (deleted or expired meanwhile).
  common::Status SaveHistory(const std::string& id, const StoredHistory& history, double last_used_unix_s);
  // Sets the last use of `id`. NOT_FOUND when it does not exist.
  common::Status Touch(const std::string& id, double last_used_unix_s);
  // Removes session `id`; OK also when it did not exist.
  common::Status Delete(const std::string& id);

  // The whole session `id`; nullopt when there is none. INTERNAL naming the session when its stored
  // history is damaged.
  common::StatusOr<std::optional<StoredSession>> Load(const std::string& id);
  // Session `id` without its history.
  common::StatusOr<std::optional<SessionSummary>> Summary(const std::string& id);
  // Every session of `owner`, least recently used first.
  common::StatusOr<std::vector<SessionSummary>> ListOwner(common::OwnerId owner);
  common::StatusOr<int64_t> CountOwner(common::OwnerId owner);
  common::StatusOr<int64_t> CountAll();
  // The least recently used session of `owner` for which `skip` is false; nullopt when none.
  common::StatusOr<std::optional<std::string>> LeastRecentlyUsed(
      common::OwnerId owner, const std::function<bool(const std::string& id)>& skip);
  // Deletes up to `limit` sessions last used before `cutoff_unix_s` (oldest first) for which `skip`
  // is false, in one transaction, and returns their ids.
  common::StatusOr<std::vector<std::string>> DeleteExpired(
      double cutoff_unix_s, int limit, const std::function<bool(const std::string& id)>& skip);
  // Copies committed WAL frames into the database file without waiting for readers or writers.
  common::Status Checkpoint();

 private:
  SessionDb(std::filesystem::path path, SqliteConnection connection)
      : path_(std::move(path)), connection_(std::move(connection)) {}
  common::Status Configure(const SessionDbOptions& options);
  common::Status Migrate(const std::vector<Migration>& migrations);
  common::StatusOr<std::vector<SessionSummary>> QuerySummaries(std::string_view where_sql,
                                                               const std::function<void(SqliteStatement&)>& bind);

  std::filesystem::path path_;
  SqliteConnection connection_;
  std::optional<std::filesystem::path> moved_aside_;
  int schema_version_ = 0;
};

}  // namespace niels::daemon::state
