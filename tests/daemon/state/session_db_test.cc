// SessionDb against real SQLite files in temp dirs: round trips across reopen, one transaction per
// change, crash durability (a child killed right after a commit), corrupt and newer databases,
// migrations, disk full (max_page_count) and expiry.
#include "daemon/state/session_db.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/temp_files.h"

namespace niels::daemon::state {
namespace {

namespace fs = std::filesystem;
using common::StatusCode;
using ::testing::HasSubstr;

StoredSession MakeSession(const std::string& id, uint32_t owner, double last_used, int turns = 2,
                          std::optional<std::string> system = "be brief") {
  StoredSession session;
  session.summary.id = id;
  session.summary.owner = owner;
  session.summary.model_fingerprint = "0123456789abcdef0123456789abcdef";
  session.summary.model_name = "tiny";
  session.summary.system_prompt = system;
  session.summary.created_unix_s = last_used - 10;
  session.summary.last_used_unix_s = last_used;
  StoredHistory& history = session.history;
  history.system_end = system ? 3 : 0;
  for (int i = 0; i < history.system_end; ++i) history.tokens.push_back(100 + i);
  for (int t = 0; t < turns; ++t) {
    const auto begin = static_cast<int64_t>(history.tokens.size());
    for (int i = 0; i < 5 + t; ++i) history.tokens.push_back(t * 1000 + i);
    history.turns.push_back({begin, static_cast<int64_t>(history.tokens.size())});
  }
  history.tokens.push_back(-7);  // a raw Generate tail token (ids are stored verbatim)
  session.summary.length = static_cast<int64_t>(history.tokens.size());
  session.summary.turn_count = turns;
  return session;
}

std::unique_ptr<SessionDb> OpenOrDie(const fs::path& path, SessionDbOptions options = {}) {
  auto db = SessionDb::Open(path, std::move(options));
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

// Runs SQL on the file directly (not through SessionDb), as another program would.
void RawExec(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

TEST(SessionDbTest, EverythingSurvivesReopen) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  const StoredSession a = MakeSession("aa", 1000, 50.0);
  const StoredSession b = MakeSession("bb", 1000, 40.0, 0, std::nullopt);
  const StoredSession c = MakeSession("cc", 1001, 60.0, 3, "");
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    EXPECT_EQ(db->schema_version(), SchemaMigrations().back().to);
    for (const auto* s : {&a, &b, &c}) ASSERT_TRUE(db->Insert(*s).ok());
  }
  auto db = OpenOrDie(path);
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->moved_aside());
  for (const auto* s : {&a, &b, &c}) {
    auto loaded = db->Load(s->summary.id);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ASSERT_TRUE(loaded->has_value());
    EXPECT_EQ(**loaded, *s);
  }
  // The empty system prompt stays distinct from "no system prompt".
  EXPECT_EQ(db->Summary("cc").value()->system_prompt, std::optional<std::string>(""));
  EXPECT_EQ(db->Summary("bb").value()->system_prompt, std::nullopt);
  EXPECT_FALSE(db->Load("zz").value().has_value());

  auto listed = db->ListOwner(1000);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0], b.summary);  // least recently used first
  EXPECT_EQ((*listed)[1], a.summary);
  EXPECT_EQ(db->CountOwner(1000).value(), 2);
  EXPECT_EQ(db->CountOwner(1001).value(), 1);
  EXPECT_EQ(db->CountOwner(7).value(), 0);
  EXPECT_EQ(db->CountAll().value(), 3);
}

TEST(SessionDbTest, FileIsPrivateAndInWalMode) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db");
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->Insert(MakeSession("aa", 1, 1.0)).ok());
  EXPECT_TRUE(fs::exists(dir / "sessions.db-wal"));
  for (const char* name : {"sessions.db", "sessions.db-wal"}) {
    EXPECT_EQ(fs::status(dir / name).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
        << name;
  }
}

TEST(SessionDbTest, SaveHistoryTouchAndDelete) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db");
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->Insert(MakeSession("aa", 1, 1.0)).ok());
  StoredHistory longer = MakeSession("aa", 1, 1.0, 4).history;
  ASSERT_TRUE(db->SaveHistory("aa", longer, 9.0).ok());
  auto loaded = db->Load("aa").value();
  EXPECT_EQ(loaded->history, longer);
  EXPECT_EQ(loaded->summary.turn_count, 4);
  EXPECT_EQ(loaded->summary.length, static_cast<int64_t>(longer.tokens.size()));
  EXPECT_EQ(loaded->summary.last_used_unix_s, 9.0);

  ASSERT_TRUE(db->Touch("aa", 12.5).ok());
  EXPECT_EQ(db->Summary("aa").value()->last_used_unix_s, 12.5);

  EXPECT_EQ(db->SaveHistory("nope", longer, 1.0).code(), StatusCode::kNotFound);
  EXPECT_EQ(db->Touch("nope", 1.0).code(), StatusCode::kNotFound);

  StoredHistory bad = longer;
  bad.turns.back().end = static_cast<int64_t>(bad.tokens.size()) + 1;
  EXPECT_EQ(db->SaveHistory("aa", bad, 1.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(db->Load("aa").value()->history, longer);  // unchanged

  ASSERT_TRUE(db->Delete("aa").ok());
  EXPECT_FALSE(db->Load("aa").value().has_value());
  EXPECT_TRUE(db->Delete("aa").ok());  // idempotent
}

TEST(SessionDbTest, DuplicateIdIsRefused) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db");
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->Insert(MakeSession("aa", 1, 1.0)).ok());
  EXPECT_FALSE(db->Insert(MakeSession("aa", 2, 1.0)).ok());
  EXPECT_EQ(db->Summary("aa").value()->owner, 1u);
}

// A committed change survives the process being killed right after the commit (no close, no
// checkpoint): what kill -9 of nielsd after a reply does.
TEST(SessionDbTest, CommitSurvivesSigkill) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  { ASSERT_TRUE(OpenOrDie(path)); }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto db = SessionDb::Open(path);
    if (!db.ok()) _exit(3);
    if (!(*db)->Insert(MakeSession("aa", 1, 1.0)).ok()) _exit(4);
    if (!(*db)->SaveHistory("aa", MakeSession("aa", 1, 2.0, 5).history, 2.0).ok()) _exit(5);
    raise(SIGKILL);
    _exit(6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  auto db = OpenOrDie(path);
  ASSERT_TRUE(db);
  auto loaded = db->Load("aa").value();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->history, MakeSession("aa", 1, 2.0, 5).history);
}

TEST(SessionDbTest, GarbageFileIsMovedAsideAndLoggedOnce) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  const std::string garbage(5000, 'x');
  testing::WriteFile(path, garbage);
  ::testing::internal::CaptureStderr();
  auto db = OpenOrDie(path);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->moved_aside());
  EXPECT_THAT(db->moved_aside()->filename().string(), HasSubstr("sessions.db.corrupt-"));
  EXPECT_EQ(testing::ReadFile(*db->moved_aside()), garbage);  // kept, byte for byte
  // One line naming both paths.
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_THAT(log, HasSubstr(path.string()));
  EXPECT_THAT(log, HasSubstr(db->moved_aside()->string()));
  // The fresh database works.
  EXPECT_EQ(db->CountAll().value(), 0);
  EXPECT_TRUE(db->Insert(MakeSession("aa", 1, 1.0)).ok());
}

TEST(SessionDbTest, DamagedPagesAreMovedAside) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(db->Insert(MakeSession(fmt::format("s{}", i), 1, i, 30)).ok());
  }
  RawExec(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  std::string bytes = testing::ReadFile(path);
  ASSERT_GT(bytes.size(), 4 * 4096u);
  for (size_t i = 4096; i < 3 * 4096; ++i) bytes[i] = static_cast<char>(0xA5);  // pages 2 and 3
  testing::WriteFile(path, bytes);
  ::testing::internal::CaptureStderr();
  auto db = OpenOrDie(path);
  ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->moved_aside());
  EXPECT_EQ(testing::ReadFile(*db->moved_aside()), bytes);
  EXPECT_EQ(db->CountAll().value(), 0);
}

TEST(SessionDbTest, NewerSchemaIsRefusedAndLeftAlone) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  { ASSERT_TRUE(OpenOrDie(path)); }
  RawExec(path, "PRAGMA user_version=99; PRAGMA wal_checkpoint(TRUNCATE)");
  const std::string before = testing::ReadFile(path);
  auto db = SessionDb::Open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(db.status().message(), HasSubstr("schema version 99"));
  EXPECT_EQ(testing::ReadFile(path), before);
  int files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_LE(files, 3);  // sessions.db and at most its -wal/-shm: nothing moved aside
}

TEST(SessionDbTest, MigrationAddsToAnOlderDatabaseAndKeepsItsRows) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  const StoredSession a = MakeSession("aa", 1, 1.0);
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Insert(a).ok());
  }
  std::vector<Migration> next = SchemaMigrations();
  const int current = next.back().to;
  next.push_back({current + 1, "ALTER TABLE sessions ADD COLUMN title TEXT NOT NULL DEFAULT 'untitled'"});
  {
    auto db = OpenOrDie(path, {.sync_commits = false, .max_bytes = 0, .migrations = next});
    ASSERT_TRUE(db);
    EXPECT_EQ(db->schema_version(), current + 1);
    EXPECT_EQ(db->Load("aa").value().value(), a);
  }
  RawExec(path, "UPDATE sessions SET title = 'kept' WHERE title = 'untitled'");  // the column exists
}

// Upper-case hex of `size` bytes at `data` (an SQL blob literal; the host is little-endian).
std::string Hex(const void* data, size_t size) {
  std::string out;
  for (size_t i = 0; i < size; ++i) out += fmt::format("{:02X}", static_cast<const uint8_t*>(data)[i]);
  return out;
}

// A database written by a nielsd of schema version 1 (no messages column) migrates to version 2:
// its rows load as they were (no messages), and a conversation saved afterwards survives reopen.
TEST(SessionDbTest, VersionOneDatabaseMigratesAndThenKeepsConversations) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  const StoredSession old_row = MakeSession("old", 1, 1.0);
  {
    const std::vector<Migration> version_one = {SchemaMigrations().front()};
    ASSERT_EQ(version_one.back().to, 1);
    auto db = OpenOrDie(path, {.sync_commits = false, .max_bytes = 0, .migrations = version_one});
    ASSERT_TRUE(db);
    EXPECT_EQ(db->schema_version(), 1);
  }
  // The row as version 1 wrote it (this nielsd's Insert writes the messages column too).
  const StoredHistory& h = old_row.history;
  std::vector<int64_t> turns;
  for (const TurnRange& turn : h.turns) turns.insert(turns.end(), {turn.begin, turn.end});
  RawExec(path, fmt::format("INSERT INTO sessions (id, owner, model_fingerprint, model_name, system_prompt, "
                            "system_end, length, turn_count, tokens, turns, created_unix_s, last_used_unix_s) "
                            "VALUES ('old', 1, '{}', 'tiny', '{}', {}, {}, {}, X'{}', X'{}', {}, {})",
                            old_row.summary.model_fingerprint, *old_row.summary.system_prompt, h.system_end,
                            h.tokens.size(), h.turns.size(), Hex(h.tokens.data(), h.tokens.size() * 4),
                            Hex(turns.data(), turns.size() * 8), old_row.summary.created_unix_s,
                            old_row.summary.last_used_unix_s));
  StoredSession chat = MakeSession("chat", 1, 2.0, 0, "be brief");
  chat.history.messages = {{"user", "Grüße \"quoted\"\n", ""},
                           {"assistant", "the answer", "first <think> reasoning\n"},
                           {"user", "", ""},
                           {"assistant", "", ""}};
  chat.summary.turn_count = 2;
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    EXPECT_EQ(db->schema_version(), SchemaMigrations().back().to);
    EXPECT_EQ(db->Load("old").value().value(), old_row);
    ASSERT_TRUE(db->Insert(chat).ok());
    StoredHistory longer = chat.history;
    longer.messages.push_back({"user", "again", ""});
    longer.messages.push_back({"assistant", "sure", "why not", {{"call_1", "get_weather", R"({"city": "Paris"})"}}});
    longer.messages.push_back({"tool", "{\"temp\": 21}", "", {}, "call_1", "get_weather"});
    longer.tools = {{"get_weather", "the weather of a city", R"({"type": "object"})"}, {"noop", "", ""}};
    ASSERT_TRUE(db->SaveHistory("chat", longer, 3.0).ok());
    chat.history = longer;
    chat.summary.turn_count = 3;
    chat.summary.last_used_unix_s = 3.0;
  }
  auto db = OpenOrDie(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(db->Load("chat").value().value(), chat);
  EXPECT_EQ(db->Load("old").value().value(), old_row);
  // A conversation out of order or a damaged column is refused, never loaded half-read.
  StoredSession odd = MakeSession("odd", 1, 4.0, 0);
  odd.history.messages = {{"robot", "first", ""}, {"user", "second", ""}};
  EXPECT_EQ(db->Insert(odd).code(), StatusCode::kInvalidArgument);
  odd.history.messages = {{"tool", "a result without its call id", ""}};
  EXPECT_EQ(db->Insert(odd).code(), StatusCode::kInvalidArgument);
  odd.history.messages = {{"user", "calls", "", {{"call_1", "f", "{}"}}}};
  EXPECT_EQ(db->Insert(odd).code(), StatusCode::kInvalidArgument);
  db.reset();
  RawExec(path, "UPDATE sessions SET messages = '[{\"role\": 7}]' WHERE id = 'chat'");
  db = OpenOrDie(path);
  ASSERT_TRUE(db);
  const auto damaged = db->Load("chat");
  EXPECT_EQ(damaged.status().code(), StatusCode::kInternal);
  EXPECT_THAT(damaged.status().message(), HasSubstr("damaged"));
}

// A stored conversation nested 200,000 levels deep (a damaged or hostile database) is refused
// while it is parsed, naming the limit; one within the limit but not a conversation is refused as
// before.
TEST(SessionDbTest, DeeplyNestedMessagesAreRefusedWhileParsed) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  StoredSession chat = MakeSession("chat", 1, 2.0, 0);
  chat.history.messages = {{"user", "hi", ""}, {"assistant", "hello", ""}};
  chat.summary.turn_count = 1;
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Insert(chat).ok());
  }
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  RawExec(path, "UPDATE sessions SET messages = '" + deep + "' WHERE id = 'chat'");
  auto db = OpenOrDie(path);
  ASSERT_TRUE(db);
  const auto damaged = db->Load("chat");
  EXPECT_EQ(damaged.status().code(), StatusCode::kInternal);
  EXPECT_EQ(damaged.status().message(), "stored session chat is damaged: the messages: nested deeper than 128 levels");
  db.reset();
  RawExec(path, "UPDATE sessions SET messages = '[" + std::string(127, '[') + std::string(127, ']') + "]' WHERE id = 'chat'");
  db = OpenOrDie(path);
  ASSERT_TRUE(db);
  EXPECT_EQ(db->Load("chat").status().message(),
            "stored session chat is damaged: message 0 is not an object with string role and content");
}

TEST(SessionDbTest, FailedMigrationRollsBackCompletely) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  const StoredSession a = MakeSession("aa", 1, 1.0);
  {
    auto db = OpenOrDie(path);
    ASSERT_TRUE(db);
    ASSERT_TRUE(db->Insert(a).ok());
  }
  std::vector<Migration> broken = SchemaMigrations();
  const int current = broken.back().to;
  broken.push_back({current + 1, "CREATE TABLE extra(x); ALTER TABLE no_such_table ADD COLUMN y"});
  auto failed = SessionDb::Open(path, {.sync_commits = false, .max_bytes = 0, .migrations = broken});
  EXPECT_FALSE(failed.ok());
  auto db = OpenOrDie(path);
  ASSERT_TRUE(db);
  EXPECT_FALSE(db->moved_aside());
  EXPECT_EQ(db->schema_version(), current);
  EXPECT_EQ(db->Load("aa").value().value(), a);
  RawExec(path, "CREATE TABLE extra(x)");  // the half-done step left nothing behind
}

TEST(SessionDbTest, FullDatabaseIsResourceExhaustedAndLeavesRowsAsTheyWere) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db", {.max_bytes = 96 * 1024, .migrations = {}});
  ASSERT_TRUE(db);
  const StoredSession small = MakeSession("small", 1, 1.0, 1);
  ASSERT_TRUE(db->Insert(small).ok());
  common::Status status;
  int inserted = 0;
  for (; inserted < 1000 && status.ok(); ++inserted) {
    status = db->Insert(MakeSession(fmt::format("big{}", inserted), 1, 2.0, 40));
  }
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("full"));
  const std::string failed_id = fmt::format("big{}", inserted - 1);
  EXPECT_FALSE(db->Load(failed_id).value().has_value());
  // Growing an existing session fails the same way and keeps its old history.
  EXPECT_EQ(db->SaveHistory("small", MakeSession("small", 1, 1.0, 200).history, 3.0).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(db->Load("small").value().value(), small);
  // Deleting makes room again.
  for (int i = 0; i + 1 < inserted; ++i) ASSERT_TRUE(db->Delete(fmt::format("big{}", i)).ok());
  ASSERT_GT(inserted, 3);
  common::Status again = db->Insert(MakeSession(failed_id, 1, 2.0, 40));
  EXPECT_TRUE(again.ok()) << again.ToString() << " after " << inserted;
}

TEST(SessionDbTest, DeleteExpiredTakesOldestFirstSkipsAndLimits) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db");
  ASSERT_TRUE(db);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(db->Insert(MakeSession(fmt::format("s{}", i), i % 2, i)).ok());
  auto skip_s1 = [](const std::string& id) { return id == "s1"; };
  auto first = db->DeleteExpired(5.0, 3, skip_s1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, (std::vector<std::string>{"s0", "s2", "s3"}));
  auto rest = db->DeleteExpired(5.0, 100, skip_s1);
  EXPECT_EQ(*rest, (std::vector<std::string>{"s4"}));
  EXPECT_EQ(db->CountAll().value(), 6);  // s1 (skipped) and s5..s9 (recent)
  EXPECT_TRUE(db->Summary("s1").value().has_value());
}

TEST(SessionDbTest, LeastRecentlyUsedOfOwner) {
  testing::TempDir dir;
  auto db = OpenOrDie(dir / "sessions.db");
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->Insert(MakeSession("new", 5, 30.0)).ok());
  ASSERT_TRUE(db->Insert(MakeSession("old", 5, 10.0)).ok());
  ASSERT_TRUE(db->Insert(MakeSession("other", 6, 1.0)).ok());
  auto none = [](const std::string&) { return false; };
  EXPECT_EQ(db->LeastRecentlyUsed(5, none).value(), std::optional<std::string>("old"));
  EXPECT_EQ(db->LeastRecentlyUsed(5, [](const std::string& id) { return id == "old"; }).value(),
            std::optional<std::string>("new"));
  EXPECT_EQ(db->LeastRecentlyUsed(7, none).value(), std::nullopt);
}

// Two connections on two threads (the engine's and a background expiry's) both write.
TEST(SessionDbTest, TwoConnectionsWriteConcurrently) {
  testing::TempDir dir;
  const fs::path path = dir / "sessions.db";
  auto writer = OpenOrDie(path);
  auto expirer = OpenOrDie(path);
  ASSERT_TRUE(writer && expirer);
  std::thread background([&] {
    for (int i = 0; i < 200; ++i) {
      auto expired = expirer->DeleteExpired(1e9, 10, [](const std::string& id) { return !id.starts_with("old"); });
      EXPECT_TRUE(expired.ok()) << expired.status().ToString();
    }
  });
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(writer->Insert(MakeSession(fmt::format("new{}", i), 1, 2e9)).ok());
    ASSERT_TRUE(writer->Insert(MakeSession(fmt::format("old{}", i), 1, 1.0)).ok());
  }
  background.join();
  (void)expirer->DeleteExpired(1e9, 1000, [](const std::string& id) { return !id.starts_with("old"); });
  EXPECT_EQ(writer->CountAll().value(), 200);
}

}  // namespace
}  // namespace niels::daemon::state
