#include "daemon/state/session_db.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/log.h"

namespace niels::daemon::state {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the stored token blobs are little-endian");

const std::vector<Migration>& SchemaMigrations() {
  // Version 1: one row per session; the history as blobs (tokens: int32 LE, turns: int64 LE pairs),
  // with its length and turn count beside it so listing never decodes a blob.
  static const std::vector<Migration> migrations = {
      {1, R"sql(
        CREATE TABLE sessions (
          id TEXT PRIMARY KEY NOT NULL,
          owner INTEGER NOT NULL,
          model_fingerprint TEXT NOT NULL,
          model_name TEXT NOT NULL,
          system_prompt TEXT,
          system_end INTEGER NOT NULL,
          length INTEGER NOT NULL,
          turn_count INTEGER NOT NULL,
          tokens BLOB NOT NULL,
          turns BLOB NOT NULL,
          created_unix_s REAL NOT NULL,
          last_used_unix_s REAL NOT NULL);
        CREATE INDEX sessions_by_owner ON sessions(owner, last_used_unix_s);
        CREATE INDEX sessions_by_last_use ON sessions(last_used_unix_s);
      )sql"},
      // Version 2: the conversation of a session of a model with a Jinja chat template, as JSON
      // ([{"role", "content", "reasoning"?}, ...]); NULL for token-native sessions and older rows.
      // turn_count counts its user/assistant exchanges too.
      {2, R"sql(
        ALTER TABLE sessions ADD COLUMN messages TEXT;
      )sql"},
      // Version 3: the session's tools as JSON ([{"name", "description"?, "parameters"?}, ...]);
      // NULL when it has none (older rows too). The messages may carry "tool_calls" ([{"id",
      // "name", "arguments"}]), "tool_call_id" and "name" (role "tool").
      {3, R"sql(
        ALTER TABLE sessions ADD COLUMN tools TEXT;
      )sql"},
  };
  return migrations;
}

namespace {

constexpr std::string_view kSummaryColumns =
    "id, owner, model_fingerprint, model_name, system_prompt, length, turn_count, created_unix_s, last_used_unix_s";

std::vector<uint8_t> EncodeTokens(const std::vector<int32_t>& tokens) {
  std::vector<uint8_t> bytes(tokens.size() * sizeof(int32_t));
  if (!tokens.empty()) std::memcpy(bytes.data(), tokens.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> EncodeTurns(const std::vector<TurnRange>& turns) {
  std::vector<int64_t> flat;
  flat.reserve(turns.size() * 2);
  for (const TurnRange& turn : turns) {
    flat.push_back(turn.begin);
    flat.push_back(turn.end);
  }
  std::vector<uint8_t> bytes(flat.size() * sizeof(int64_t));
  if (!flat.empty()) std::memcpy(bytes.data(), flat.data(), bytes.size());
  return bytes;
}

// The conversation as the messages column stores it: NULL (nullopt) when there is none. Invalid
// UTF-8 (never written by nielsd, whose texts are repaired) would become U+FFFD.
std::optional<std::string> EncodeMessages(const std::vector<StoredMessage>& messages) {
  if (messages.empty()) return std::nullopt;
  nlohmann::json array = nlohmann::json::array();
  for (const StoredMessage& message : messages) {
    nlohmann::json object = {{"role", message.role}, {"content", message.content}};
    if (!message.reasoning.empty()) object["reasoning"] = message.reasoning;
    if (!message.tool_calls.empty()) {
      nlohmann::json calls = nlohmann::json::array();
      for (const StoredToolCall& call : message.tool_calls) {
        calls.push_back({{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
      }
      object["tool_calls"] = std::move(calls);
    }
    if (!message.tool_call_id.empty()) object["tool_call_id"] = message.tool_call_id;
    if (!message.name.empty()) object["name"] = message.name;
    array.push_back(std::move(object));
  }
  return array.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Reads the string `key` of `object` into *out: false when it is not a string, or missing and
// `required`.
bool TextField(const nlohmann::json& object, const char* key, bool required, std::string& out) {
  const auto it = object.find(key);
  if (it == object.end()) return !required;
  if (!it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

// The stored conversation; an empty string when `text` is not what EncodeMessages writes.
std::string DecodeMessages(std::string_view text, std::vector<StoredMessage>& messages) {
  common::JsonParseFailure failure = common::JsonParseFailure::kNone;
  const common::StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(text, "the messages", &failure);
  if (failure == common::JsonParseFailure::kTooDeep) return parsed.status().message();
  if (!parsed.ok() || !parsed->is_array()) return "the messages are not a JSON array";
  const nlohmann::json& array = *parsed;
  for (const nlohmann::json& object : array) {
    StoredMessage message;
    if (!object.is_object() || !TextField(object, "role", true, message.role) ||
        !TextField(object, "content", true, message.content) ||
        !TextField(object, "reasoning", false, message.reasoning) ||
        !TextField(object, "tool_call_id", false, message.tool_call_id) ||
        !TextField(object, "name", false, message.name)) {
      return fmt::format("message {} is not an object with string role and content", messages.size());
    }
    if (const auto calls = object.find("tool_calls"); calls != object.end()) {
      if (!calls->is_array()) return fmt::format("message {}: tool_calls is not an array", messages.size());
      for (const nlohmann::json& call : *calls) {
        StoredToolCall stored;
        if (!call.is_object() || !TextField(call, "id", true, stored.id) || !TextField(call, "name", true, stored.name) ||
            !TextField(call, "arguments", true, stored.arguments)) {
          return fmt::format("message {}: a tool call is not an object with string id, name and arguments",
                             messages.size());
        }
        message.tool_calls.push_back(std::move(stored));
      }
    }
    messages.push_back(std::move(message));
  }
  return "";
}

// The tools as the tools column stores them: NULL (nullopt) when there are none.
std::optional<std::string> EncodeTools(const std::vector<StoredTool>& tools) {
  if (tools.empty()) return std::nullopt;
  nlohmann::json array = nlohmann::json::array();
  for (const StoredTool& tool : tools) {
    nlohmann::json object = {{"name", tool.name}};
    if (!tool.description.empty()) object["description"] = tool.description;
    if (!tool.parameters.empty()) object["parameters"] = tool.parameters;
    array.push_back(std::move(object));
  }
  return array.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The stored tools; an empty string when `text` is not what EncodeTools writes.
std::string DecodeTools(std::string_view text, std::vector<StoredTool>& tools) {
  common::JsonParseFailure failure = common::JsonParseFailure::kNone;
  const common::StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(text, "the tools", &failure);
  if (failure == common::JsonParseFailure::kTooDeep) return parsed.status().message();
  if (!parsed.ok() || !parsed->is_array()) return "the tools are not a JSON array";
  for (const nlohmann::json& object : *parsed) {
    StoredTool tool;
    if (!object.is_object() || !TextField(object, "name", true, tool.name) ||
        !TextField(object, "description", false, tool.description) ||
        !TextField(object, "parameters", false, tool.parameters)) {
      return fmt::format("tool {} is not an object with a string name", tools.size());
    }
    tools.push_back(std::move(tool));
  }
  return "";
}

void BindTools(SqliteStatement& statement, int index, const std::vector<StoredTool>& tools) {
  if (std::optional<std::string> json = EncodeTools(tools)) {
    statement.BindText(index, *json);
  } else {
    statement.BindNull(index);
  }
}

void BindMessages(SqliteStatement& statement, int index, const std::vector<StoredMessage>& messages) {
  if (std::optional<std::string> json = EncodeMessages(messages)) {
    statement.BindText(index, *json);
  } else {
    statement.BindNull(index);
  }
}

SessionSummary ReadSummary(const SqliteStatement& row) {
  SessionSummary summary;
  summary.id = row.ColumnText(0);
  summary.owner = static_cast<common::OwnerId>(row.ColumnInt(1));
  summary.model_fingerprint = row.ColumnText(2);
  summary.model_name = row.ColumnText(3);
  if (!row.ColumnIsNull(4)) summary.system_prompt = row.ColumnText(4);
  summary.length = row.ColumnInt(5);
  summary.turn_count = row.ColumnInt(6);
  summary.created_unix_s = row.ColumnDouble(7);
  summary.last_used_unix_s = row.ColumnDouble(8);
  return summary;
}

// "20250102T030405Z": a UTC timestamp for the name of a moved-aside file.
std::string UtcStamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

// Renames `path` (and its -wal and -shm files) to an unused "<path>.corrupt-<stamp>[-n]" name.
common::StatusOr<fs::path> MoveAside(const fs::path& path) {
  const std::string base = path.string() + ".corrupt-" + UtcStamp();
  fs::path target = base;
  for (int n = 1; fs::exists(target) && n < 1000; ++n) target = fmt::format("{}-{}", base, n);
  std::error_code error;
  fs::rename(path, target, error);
  if (error) {
    return common::Status::Internal(
        fmt::format("cannot move the unreadable session database {} aside: {}", path.string(), error.message()));
  }
  for (const char* suffix : {"-wal", "-shm"}) {
    const fs::path side = path.string() + suffix;
    if (fs::exists(side, error)) fs::rename(side, target.string() + suffix, error);
  }
  return target;
}

// True when Open() failing with `status` means the file itself is unusable (so it is moved aside)
// rather than, say, the directory or a lock held by another process.
bool FileIsUnusable(const common::Status& status, int rc) {
  if (IsCorruptionCode(rc)) return true;
  const int primary = rc & 0xff;
  return primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR || primary == SQLITE_READONLY ||
         primary == SQLITE_PERM || primary == SQLITE_AUTH || primary == SQLITE_FORMAT;
}

}  // namespace

common::Status SessionDb::Configure(const SessionDbOptions& options) {
  auto mode = connection_.Prepare("PRAGMA journal_mode=WAL");
  if (!mode.ok()) return mode.status();
  bool has_row = false;
  NIELS_RETURN_IF_ERROR(mode->Step(&has_row));
  if (!has_row || mode->ColumnText(0) != "wal") {
    return common::Status::Internal(fmt::format("state database {}: cannot switch to WAL mode", path_.string()));
  }
  NIELS_RETURN_IF_ERROR(connection_.Exec(options.sync_commits ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  if (!options.auto_checkpoint) NIELS_RETURN_IF_ERROR(connection_.Exec("PRAGMA wal_autocheckpoint=0"));
  if (options.max_bytes > 0) {
    auto page_size = connection_.QueryInt("PRAGMA page_size");
    if (!page_size.ok()) return page_size.status();
    const uint64_t pages = std::max<uint64_t>(1, options.max_bytes / static_cast<uint64_t>(*page_size));
    NIELS_RETURN_IF_ERROR(connection_.Exec(fmt::format("PRAGMA max_page_count={}", pages)));
  }
  if (!options.check_integrity) return common::Status::Ok();
  auto check = connection_.Prepare("PRAGMA quick_check");
  if (!check.ok()) return check.status();
  NIELS_RETURN_IF_ERROR(check->Step(&has_row));
  if (!has_row || check->ColumnText(0) != "ok") {
    return common::Status::Internal(fmt::format("integrity check failed: {}", has_row ? check->ColumnText(0) : ""));
  }
  return common::Status::Ok();
}

common::Status SessionDb::Migrate(const std::vector<Migration>& migrations) {
  auto version = connection_.QueryInt("PRAGMA user_version");
  if (!version.ok()) return version.status();
  const int latest = migrations.empty() ? 0 : migrations.back().to;
  if (*version > latest) {
    return common::Status::InvalidArgument(fmt::format(
        "the session database {} has schema version {}, newer than this nielsd understands ({}); "
        "run a newer nielsd, or point --state-dir elsewhere",
        path_.string(), *version, latest));
  }
  for (const Migration& step : migrations) {
    if (step.to <= *version) continue;
    SqliteTransaction transaction(connection_);
    NIELS_RETURN_IF_ERROR(transaction.begin_status());
    NIELS_RETURN_IF_ERROR(connection_.Exec(step.sql));
    NIELS_RETURN_IF_ERROR(connection_.Exec(fmt::format("PRAGMA user_version={}", step.to)));
    NIELS_RETURN_IF_ERROR(transaction.Commit());
    if (*version == 0) {
      common::LogDebug("state: session database {} created at schema version {}", path_.string(), step.to);
    } else {
      common::LogInfo("state: session database {} migrated to schema version {}", path_.string(), step.to);
    }
  }
  schema_version_ = latest;
  return common::Status::Ok();
}

common::StatusOr<std::unique_ptr<SessionDb>> SessionDb::Open(const fs::path& path, SessionDbOptions options) {
  const std::vector<Migration>& migrations = options.migrations.empty() ? SchemaMigrations() : options.migrations;
  std::optional<fs::path> moved;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool existed = fs::exists(path);
    if (!existed) {
      // Sessions are private: create the file 0600 (SQLite gives its -wal and -shm the same mode).
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd >= 0) ::close(fd);
    }
    int rc = SQLITE_OK;
    common::Status status;
    std::unique_ptr<SessionDb> db;
    auto connection = SqliteConnection::Open(path.string());
    if (!connection.ok()) {
      status = connection.status();
      rc = SQLITE_CANTOPEN;
    } else {
      db.reset(new SessionDb(path, std::move(connection).value()));
      status = db->Configure(options);
      if (!status.ok()) rc = sqlite3_extended_errcode(db->connection_.raw());
      // A damaged file may pass the pragmas and fail at the schema (a readable page with garbage).
      if (status.ok()) {
        status = db->Migrate(migrations);
        if (status.code() == common::StatusCode::kInvalidArgument) return status;  // newer schema: refuse
        if (!status.ok()) rc = sqlite3_extended_errcode(db->connection_.raw());
      }
      if (status.ok()) {
        // Every statement the daemon will use must prepare against the schema found.
        status = db->QuerySummaries("id = ''", [](SqliteStatement&) {}).status();
        if (!status.ok()) rc = SQLITE_CORRUPT;
      }
    }
    if (status.ok()) {
      db->moved_aside_ = moved;
      return db;
    }
    // The integrity check reports corruption through its result, not a result code.
    if (status.message().starts_with("integrity check failed")) rc = SQLITE_CORRUPT;
    db.reset();
    if (attempt > 0 || !existed || !FileIsUnusable(status, rc)) {
      return common::Status(status.code(),
                            fmt::format("session database {}: {}", path.string(), status.message()));
    }
    auto target = MoveAside(path);
    if (!target.ok()) return target.status();
    common::LogWarn("state: the session database {} is unreadable ({}); moved it to {} and started an empty one",
                    path.string(), status.message(), target->string());
    moved = *target;
  }
  return common::Status::Internal("unreachable");
}

common::Status SessionDb::Insert(const StoredSession& session) {
  if (std::string problem = HistoryProblem(session.history); !problem.empty()) {
    return common::Status::InvalidArgument(fmt::format("session {}: {}", session.summary.id, problem));
  }
  auto statement = connection_.Prepare(
      "INSERT INTO sessions (id, owner, model_fingerprint, model_name, system_prompt, system_end, length, "
      "turn_count, tokens, turns, created_unix_s, last_used_unix_s, messages, tools) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
      "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  if (!statement.ok()) return statement.status();
  const SessionSummary& s = session.summary;
  const StoredHistory& h = session.history;
  statement->BindText(1, s.id);
  statement->BindInt(2, static_cast<int64_t>(s.owner));
  statement->BindText(3, s.model_fingerprint);
  statement->BindText(4, s.model_name);
  if (s.system_prompt) {
    statement->BindText(5, *s.system_prompt);
  } else {
    statement->BindNull(5);
  }
  statement->BindInt(6, h.system_end);
  statement->BindInt(7, static_cast<int64_t>(h.tokens.size()));
  statement->BindInt(8, h.turn_count());
  statement->BindBlob(9, EncodeTokens(h.tokens));
  statement->BindBlob(10, EncodeTurns(h.turns));
  statement->BindDouble(11, s.created_unix_s);
  statement->BindDouble(12, s.last_used_unix_s);
  BindMessages(*statement, 13, h.messages);
  BindTools(*statement, 14, h.tools);
  return statement->Run();  // one statement in autocommit mode: one transaction
}

common::Status SessionDb::SaveHistory(const std::string& id, const StoredHistory& history, double last_used_unix_s) {
  if (std::string problem = HistoryProblem(history); !problem.empty()) {
    return common::Status::InvalidArgument(fmt::format("session {}: {}", id, problem));
  }
  auto statement = connection_.Prepare(
      "UPDATE sessions SET system_end = ?2, length = ?3, turn_count = ?4, tokens = ?5, turns = ?6, "
      "last_used_unix_s = ?7, messages = ?8, tools = ?9 WHERE id = ?1");
  if (!statement.ok()) return statement.status();
  statement->BindText(1, id);
  statement->BindInt(2, history.system_end);
  statement->BindInt(3, static_cast<int64_t>(history.tokens.size()));
  statement->BindInt(4, history.turn_count());
  statement->BindBlob(5, EncodeTokens(history.tokens));
  statement->BindBlob(6, EncodeTurns(history.turns));
  statement->BindDouble(7, last_used_unix_s);
  BindMessages(*statement, 8, history.messages);
  BindTools(*statement, 9, history.tools);
  NIELS_RETURN_IF_ERROR(statement->Run());
  if (connection_.Changes() == 0) return common::Status::NotFound(fmt::format("unknown session {}", id));
  return common::Status::Ok();
}

common::Status SessionDb::Touch(const std::string& id, double last_used_unix_s) {
  auto statement = connection_.Prepare("UPDATE sessions SET last_used_unix_s = ?2 WHERE id = ?1");
  if (!statement.ok()) return statement.status();
  statement->BindText(1, id);
  statement->BindDouble(2, last_used_unix_s);
  NIELS_RETURN_IF_ERROR(statement->Run());
  if (connection_.Changes() == 0) return common::Status::NotFound(fmt::format("unknown session {}", id));
  return common::Status::Ok();
}

common::Status SessionDb::Delete(const std::string& id) {
  auto statement = connection_.Prepare("DELETE FROM sessions WHERE id = ?1");
  if (!statement.ok()) return statement.status();
  statement->BindText(1, id);
  return statement->Run();
}

common::StatusOr<std::optional<StoredSession>> SessionDb::Load(const std::string& id) {
  auto statement = connection_.Prepare(fmt::format(
      "SELECT {}, system_end, tokens, turns, messages, tools FROM sessions WHERE id = ?1", kSummaryColumns));
  if (!statement.ok()) return statement.status();
  statement->BindText(1, id);
  bool has_row = false;
  NIELS_RETURN_IF_ERROR(statement->Step(&has_row));
  if (!has_row) return std::optional<StoredSession>();
  StoredSession session;
  session.summary = ReadSummary(*statement);
  session.history.system_end = statement->ColumnInt(9);
  const std::vector<uint8_t> tokens = statement->ColumnBlob(10);
  const std::vector<uint8_t> turns = statement->ColumnBlob(11);
  if (!statement->ColumnIsNull(12)) {
    if (std::string problem = DecodeMessages(statement->ColumnText(12), session.history.messages); !problem.empty()) {
      return common::Status::Internal(fmt::format("stored session {} is damaged: {}", id, problem));
    }
  }
  if (!statement->ColumnIsNull(13)) {
    if (std::string problem = DecodeTools(statement->ColumnText(13), session.history.tools); !problem.empty()) {
      return common::Status::Internal(fmt::format("stored session {} is damaged: {}", id, problem));
    }
  }
  if (tokens.size() % sizeof(int32_t) != 0 || turns.size() % (2 * sizeof(int64_t)) != 0 ||
      static_cast<int64_t>(tokens.size() / sizeof(int32_t)) != session.summary.length ||
      static_cast<int64_t>(turns.size() / (2 * sizeof(int64_t))) + session.history.turn_count() !=
          session.summary.turn_count) {  // turn_count() counts the replies: the turns are not read yet
    return common::Status::Internal(fmt::format("stored session {} is damaged: history sizes do not match", id));
  }
  session.history.tokens.resize(tokens.size() / sizeof(int32_t));
  if (!tokens.empty()) std::memcpy(session.history.tokens.data(), tokens.data(), tokens.size());
  std::vector<int64_t> flat(turns.size() / sizeof(int64_t));
  if (!turns.empty()) std::memcpy(flat.data(), turns.data(), turns.size());
  for (size_t i = 0; i + 1 < flat.size(); i += 2) session.history.turns.push_back({flat[i], flat[i + 1]});
  if (std::string problem = HistoryProblem(session.history); !problem.empty()) {
    return common::Status::Internal(fmt::format("stored session {} is damaged: {}", id, problem));
  }
  return std::optional<StoredSession>(std::move(session));
}

common::StatusOr<std::vector<SessionSummary>> SessionDb::QuerySummaries(
    std::string_view where_sql, const std::function<void(SqliteStatement&)>& bind) {
  auto statement = connection_.Prepare(fmt::format("SELECT {} FROM sessions WHERE {} ORDER BY last_used_unix_s, id",
                                                   kSummaryColumns, where_sql));
  if (!statement.ok()) return statement.status();
  bind(*statement);
  std::vector<SessionSummary> result;
  for (;;) {
    bool has_row = false;
    NIELS_RETURN_IF_ERROR(statement->Step(&has_row));
    if (!has_row) break;
    result.push_back(ReadSummary(*statement));
  }
  return result;
}

common::StatusOr<std::optional<SessionSummary>> SessionDb::Summary(const std::string& id) {
  auto rows = QuerySummaries("id = ?1", [&](SqliteStatement& s) { s.BindText(1, id); });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<SessionSummary>();
  return std::optional<SessionSummary>(std::move(rows->front()));
}

common::StatusOr<std::vector<SessionSummary>> SessionDb::ListOwner(common::OwnerId owner) {
  return QuerySummaries("owner = ?1", [&](SqliteStatement& s) { s.BindInt(1, static_cast<int64_t>(owner)); });
}

common::StatusOr<int64_t> SessionDb::CountOwner(common::OwnerId owner) {
  auto statement = connection_.Prepare("SELECT COUNT(*) FROM sessions WHERE owner = ?1");
  if (!statement.ok()) return statement.status();
  statement->BindInt(1, static_cast<int64_t>(owner));
  bool has_row = false;
  NIELS_RETURN_IF_ERROR(statement->Step(&has_row));
  return statement->ColumnInt(0);
}

common::StatusOr<int64_t> SessionDb::CountAll() { return connection_.QueryInt("SELECT COUNT(*) FROM sessions"); }

common::StatusOr<std::optional<std::string>> SessionDb::LeastRecentlyUsed(
    common::OwnerId owner, const std::function<bool(const std::string& id)>& skip) {
  auto statement = connection_.Prepare("SELECT id FROM sessions WHERE owner = ?1 ORDER BY last_used_unix_s, id");
  if (!statement.ok()) return statement.status();
  statement->BindInt(1, static_cast<int64_t>(owner));
  for (;;) {
    bool has_row = false;
    NIELS_RETURN_IF_ERROR(statement->Step(&has_row));
    if (!has_row) return std::optional<std::string>();
    std::string id = statement->ColumnText(0);
    if (!skip(id)) return std::optional<std::string>(std::move(id));
  }
}

common::StatusOr<std::vector<std::string>> SessionDb::DeleteExpired(
    double cutoff_unix_s, int limit, const std::function<bool(const std::string& id)>& skip) {
  SqliteTransaction transaction(connection_);
  NIELS_RETURN_IF_ERROR(transaction.begin_status());
  auto select = connection_.Prepare(
      "SELECT id FROM sessions WHERE last_used_unix_s < ?1 ORDER BY last_used_unix_s, id");
  if (!select.ok()) return select.status();
  select->BindDouble(1, cutoff_unix_s);
  std::vector<std::string> expired;
  while (static_cast<int>(expired.size()) < limit) {
    bool has_row = false;
    NIELS_RETURN_IF_ERROR(select->Step(&has_row));
    if (!has_row) break;
    std::string id = select->ColumnText(0);
    if (!skip(id)) expired.push_back(std::move(id));
  }
  select->Reset();
  for (const std::string& id : expired) NIELS_RETURN_IF_ERROR(Delete(id));
  NIELS_RETURN_IF_ERROR(transaction.Commit());
  return expired;
}

}  // namespace niels::daemon::state

namespace niels::daemon::state {

common::Status SessionDb::Checkpoint() { return connection_.Exec("PRAGMA wal_checkpoint(PASSIVE)"); }

}  // namespace niels::daemon::state
