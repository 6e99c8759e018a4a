#pragma once
// A thin RAII layer over the SQLite C API for nielsd's state database: a connection, prepared
// statements with typed binds and columns, and the mapping of SQLite result codes to Status.
//
// Errors: every call that can fail returns Status (never throws). SQLITE_FULL (disk full, or the
// connection's max_page_count reached) maps to RESOURCE_EXHAUSTED; SQLITE_CORRUPT and
// SQLITE_NOTADB map to INTERNAL with IsCorruption() true; everything else to INTERNAL. Messages
// carry sqlite3_errmsg().
//
// Threading: one SqliteConnection and its statements are used by one thread at a time (SQLite's
// "multi-thread" mode); separate connections to the same file may live on different threads.

#include <sqlite3.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace niels::daemon::state {

// The Status for SQLite result code `rc` (extended codes allowed) with `what` and `detail`.
common::Status SqliteStatus(int rc, std::string_view what, std::string_view detail);
// True for a result code that means the file is damaged or is not a database.
bool IsCorruptionCode(int rc);

class SqliteConnection;

// A prepared statement. Bind indices start at 1, column indices at 0.
class SqliteStatement {
 public:
  SqliteStatement() = default;
  ~SqliteStatement();
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&& other) noexcept;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  void BindInt(int index, int64_t value);
  void BindDouble(int index, double value);
  void BindText(int index, std::string_view value);
  void BindBlob(int index, std::span<const uint8_t> value);
  void BindNull(int index);

  // Runs one step: *has_row tells whether a row is available. Errors as the file comment.
  common::Status Step(bool* has_row);
  // Steps until done (for statements that return no rows).
  common::Status Run();
  // Back to before the first step, bindings cleared.
  void Reset();

  int64_t ColumnInt(int column) const;
  double ColumnDouble(int column) const;
  bool ColumnIsNull(int column) const;
  std::string ColumnText(int column) const;
  std::vector<uint8_t> ColumnBlob(int column) const;

 private:
  friend class SqliteConnection;
  SqliteStatement(sqlite3* db, sqlite3_stmt* statement) : db_(db), statement_(statement) {}

  sqlite3* db_ = nullptr;
  sqlite3_stmt* statement_ = nullptr;
};

class SqliteConnection {
 public:
  SqliteConnection() = default;
  ~SqliteConnection();
  SqliteConnection(SqliteConnection&& other) noexcept;
  SqliteConnection& operator=(SqliteConnection&& other) noexcept;
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Opens (creating if missing) the database file at `path` with a busy timeout of `busy_ms`.
  static common::StatusOr<SqliteConnection> Open(const std::string& path, int busy_ms = 5000);

  bool is_open() const { return db_ != nullptr; }
  // Runs one or more statements without results.
  common::Status Exec(std::string_view sql);
  common::StatusOr<SqliteStatement> Prepare(std::string_view sql);
  // The single integer a query such as "PRAGMA user_version" returns.
  common::StatusOr<int64_t> QueryInt(std::string_view sql);
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  sqlite3* raw() const { return db_; }

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless Commit() succeeded.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteConnection& connection);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;

  // The status of BEGIN; nothing else may run when it failed.
  const common::Status& begin_status() const { return begin_; }
  common::Status Commit();

 private:
  SqliteConnection& connection_;
  common::Status begin_;
  bool open_ = false;
};

}  // namespace niels::daemon::state
