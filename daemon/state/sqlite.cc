#include "daemon/state/sqlite.h"

#include <fmt/format.h>

#include <utility>

namespace niels::daemon::state {

bool IsCorruptionCode(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

common::Status SqliteStatus(int rc, std::string_view what, std::string_view detail) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return common::Status::Ok();
  const int primary = rc & 0xff;
  std::string message = fmt::format("{}: {}", what, detail.empty() ? sqlite3_errstr(rc) : detail);
  if (primary == SQLITE_FULL) {
    return common::Status::ResourceExhausted(std::move(message));
  }
  return common::Status::Internal(std::move(message));
}

// ------------------------------------------------------------------------------- statement

SqliteStatement::~SqliteStatement() { sqlite3_finalize(statement_); }

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), statement_(std::exchange(other.statement_, nullptr)) {}

SqliteStatement& SqliteStatement::operator=(SqliteStatement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(statement_);
    db_ = std::exchange(other.db_, nullptr);
    statement_ = std::exchange(other.statement_, nullptr);
  }
  return *this;
}

void SqliteStatement::BindInt(int index, int64_t value) { sqlite3_bind_int64(statement_, index, value); }
void SqliteStatement::BindDouble(int index, double value) { sqlite3_bind_double(statement_, index, value); }
void SqliteStatement::BindText(int index, std::string_view value) {
  sqlite3_bind_text64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}
void SqliteStatement::BindBlob(int index, std::span<const uint8_t> value) {
  // A zero-length blob must still be a blob, not NULL: sqlite3_bind_zeroblob for the empty case.
  if (value.empty()) {
    sqlite3_bind_zeroblob(statement_, index, 0);
  } else {
    sqlite3_bind_blob64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT);
  }
}
void SqliteStatement::BindNull(int index) { sqlite3_bind_null(statement_, index); }

common::Status SqliteStatement::Step(bool* has_row) {
  const int rc = sqlite3_step(statement_);
  *has_row = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) return common::Status::Ok();
  common::Status status = SqliteStatus(rc, "state database", sqlite3_errmsg(db_));
  sqlite3_reset(statement_);
  return status;
}

common::Status SqliteStatement::Run() {
  bool has_row = true;
  while (has_row) NIELS_RETURN_IF_ERROR(Step(&has_row));
  return common::Status::Ok();
}

void SqliteStatement::Reset() {
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
}

int64_t SqliteStatement::ColumnInt(int column) const { return sqlite3_column_int64(statement_, column); }
double SqliteStatement::ColumnDouble(int column) const { return sqlite3_column_double(statement_, column); }
bool SqliteStatement::ColumnIsNull(int column) const {
  return sqlite3_column_type(statement_, column) == SQLITE_NULL;
}
std::string SqliteStatement::ColumnText(int column) const {
  const auto* text = sqlite3_column_text(statement_, column);
  const int size = sqlite3_column_bytes(statement_, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text), size);
}
std::vector<uint8_t> SqliteStatement::ColumnBlob(int column) const {
  const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(statement_, column));
  const int size = sqlite3_column_bytes(statement_, column);
  return data == nullptr ? std::vector<uint8_t>() : std::vector<uint8_t>(data, data + size);
}

// ------------------------------------------------------------------------------ connection

SqliteConnection::~SqliteConnection() { sqlite3_close_v2(db_); }

SqliteConnection::SqliteConnection(SqliteConnection&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

SqliteConnection& SqliteConnection::operator=(SqliteConnection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

common::StatusOr<SqliteConnection> SqliteConnection::Open(const std::string& path, int busy_ms) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    common::Status status = SqliteStatus(rc, fmt::format("cannot open {}", path),
                                         db != nullptr ? sqlite3_errmsg(db) : "");
    sqlite3_close_v2(db);
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_ms);
  return SqliteConnection(db);
}

common::Status SqliteConnection::Exec(std::string_view sql) {
  const std::string text(sql);
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  common::Status status = SqliteStatus(rc, "state database", error != nullptr ? error : "");
  sqlite3_free(error);
  return status;
}

common::StatusOr<SqliteStatement> SqliteConnection::Prepare(std::string_view sql) {
  sqlite3_stmt* statement = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT,
                                    &statement, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(rc, "state database", sqlite3_errmsg(db_));
  return SqliteStatement(db_, statement);
}

common::StatusOr<int64_t> SqliteConnection::QueryInt(std::string_view sql) {
  auto statement = Prepare(sql);
  if (!statement.ok()) return statement.status();
  bool has_row = false;
  NIELS_RETURN_IF_ERROR(statement->Step(&has_row));
  if (!has_row) return common::Status::Internal(fmt::format("state database: no result for {}", sql));
  return statement->ColumnInt(0);
}

int64_t SqliteConnection::Changes() const { return sqlite3_changes64(db_); }

// ----------------------------------------------------------------------------- transaction

SqliteTransaction::SqliteTransaction(SqliteConnection& connection) : connection_(connection) {
  begin_ = connection_.Exec("BEGIN IMMEDIATE");
  open_ = begin_.ok();
}

SqliteTransaction::~SqliteTransaction() {
  // After a failed statement SQLite may already have rolled the transaction back by itself.
  if (open_ && sqlite3_get_autocommit(connection_.raw()) == 0) (void)connection_.Exec("ROLLBACK");
}

common::Status SqliteTransaction::Commit() {
  if (!open_) return begin_.ok() ? common::Status::Internal("state database: transaction already ended") : begin_;
  common::Status status = connection_.Exec("COMMIT");
  // A failed COMMIT (e.g. SQLITE_FULL) leaves the transaction open: the destructor rolls it back.
  if (status.ok()) open_ = false;
  return status;
}

}  // namespace niels::daemon::state
