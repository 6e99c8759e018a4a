// Durable sessions with real nielsd processes (docs/ARCHITECTURE.md, "Durable sessions"): restarts,
// kill -9 at several points of a turn, owners across a restart, a corrupt database, an unusable
// state directory, a database of another model, a full database, TTL expiry, KV spill read back
// and a damaged spill file, and niels-chat --resume across a restart.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/integration_fixture.h"
#include "tests/support/temp_files.h"

namespace niels::integration {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::niels::v1;
using ::testing::HasSubstr;

const std::vector<std::string> kQuestions = {"hello there", "what is nielsd?", "tell me more", "and then?",
                                             "thanks", "one more thing"};

class DurableSessionsTest : public IntegrationTest {
 protected:
  fs::path state_dir() const { return dir_.path() / "state"; }

  testing::DaemonProcessOptions Options(std::vector<std::string> extra = {}) const {
    testing::DaemonProcessOptions options = DaemonOptions();
    options.extra_args.push_back("--state-dir");
    options.extra_args.push_back(state_dir().string());
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    return options;
  }
  void Start(std::vector<std::string> extra = {}) { daemon_ = testing::DaemonProcess::Start(Options(extra)); }
  // SIGTERM, then start again with the same state directory.
  void Restart(std::vector<std::string> extra = {}) {
    ASSERT_EQ(daemon_->Stop(), 0) << daemon_->log();
    Start(extra);
  }
  void Kill9() {
    daemon_->Signal(SIGKILL);
    ASSERT_TRUE(daemon_->Wait(std::chrono::seconds(10)).has_value());
  }

  static v1::GetSessionResponse MustGet(client::DaemonClient& client, const std::string& id) {
    auto got = client.GetSession(id);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? *got : v1::GetSessionResponse();
  }
  static std::vector<int32_t> Tokens(const v1::GetSessionResponse& got) {
    return {got.token_ids().begin(), got.token_ids().end()};
  }
  static std::string NewSession(client::DaemonClient& client, const std::string& system = "you are terse.") {
    auto created = client.CreateSession(system);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->session_id() : "";
  }
  static std::string Reply(client::DaemonClient& client, const std::string& id, const std::string& text,
                           int max_new_tokens = 6) {
    auto reply = client.Chat(GreedyChat(id, text, max_new_tokens));
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->reply() : "";
  }
};

// 5 turns, SIGTERM, restart: the session is identical and turn 6 gives the reply an uninterrupted
// daemon gives.
TEST_F(DurableSessionsTest, RestartKeepsTheSessionAndTheNextReplyMatchesAnUninterruptedDaemon) {
  std::vector<std::string> uninterrupted;
  {
    testing::DaemonProcessOptions options = DaemonOptions();
    options.extra_args.push_back("--ephemeral");
    daemon_ = testing::DaemonProcess::Start(options);
    auto client = Connect();
    const std::string id = NewSession(*client);
    for (const std::string& q : kQuestions) uninterrupted.push_back(Reply(*client, id, q));
    ASSERT_EQ(daemon_->Stop(), 0);
  }
  Start();
  auto client = Connect();
  const std::string id = NewSession(*client);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(Reply(*client, id, kQuestions[i]), uninterrupted[i]) << i;
  const v1::GetSessionResponse before = MustGet(*client, id);
  EXPECT_EQ(before.session().turns(), 5);
  client.reset();
  Restart();
  client = Connect();
  const v1::GetSessionResponse after = MustGet(*client, id);
  EXPECT_EQ(Tokens(after), Tokens(before));
  EXPECT_EQ(after.session().turns(), 5);
  EXPECT_EQ(after.session().length(), before.session().length());
  EXPECT_TRUE(after.session().has_system_prompt());
  EXPECT_EQ(after.session().system_prompt_text(), "you are terse.");
  EXPECT_DOUBLE_EQ(after.session().created_unix_s(), before.session().created_unix_s());
  EXPECT_EQ(after.session().cached_tokens(), 0);  // history only; the cache is rebuilt on use
  EXPECT_EQ(Reply(*client, id, kQuestions[5]), uninterrupted[5]);
  auto info = client->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->durable_sessions());
}

// kill -9 at several points of a streamed turn: every completed turn is there, the interrupted
// one is not, and the database is intact (no "moved aside" on restart).
TEST_F(DurableSessionsTest, KillNineAtAnyPointKeepsCompletedTurnsOnly) {
  Start();
  std::string id;
  {
    auto client = Connect();
    id = NewSession(*client);
    Reply(*client, id, kQuestions[0]);
  }
  // After this many stream events the daemon is killed; -1: right after the final response.
  for (int kill_after : {0, 1, 5, -1}) {
    SCOPED_TRACE(fmt::format("kill after {} events", kill_after));
    auto client = Connect();
    const v1::GetSessionResponse before_session = MustGet(*client, id);
    const std::vector<int32_t> before = Tokens(before_session);
    v1::ChatRequest request = GreedyChat(id, "tell me a long story", kill_after < 0 ? 4 : 200);
    request.set_stream(true);
    std::atomic<int> events{0};
    std::atomic<bool> killed{false};
    std::thread killer;
    if (kill_after == 0) {
      killer = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        daemon_->Signal(SIGKILL);
        killed = true;
      });
    }
    auto reply = client->Chat(request, [&](const v1::TokenEvent&) {
      if (++events == kill_after && !killed.exchange(true)) daemon_->Signal(SIGKILL);
    });
    if (killer.joinable()) killer.join();
    const bool completed = reply.ok();
    if (kill_after < 0) {
      ASSERT_TRUE(completed) << reply.status().ToString();
      daemon_->Signal(SIGKILL);  // the reply arrived: the turn must already be on disk
    }
    ASSERT_TRUE(daemon_->Wait(std::chrono::seconds(10)).has_value());
    client.reset();
    Start();
    client = Connect();
    const v1::GetSessionResponse after_session = MustGet(*client, id);
    const std::vector<int32_t> after = Tokens(after_session);
    const bool has_turn = after_session.session().turns() == before_session.session().turns() + 1 &&
                          after.size() > before.size() && std::equal(before.begin(), before.end(), after.begin());
    if (completed) {
      EXPECT_TRUE(has_turn) << "a reply was received but its turn is gone";
    } else if (!has_turn) {
      // Killed before the reply reached the client: the turn is not there at all -- or, when the
      // kill came between the turn's commit and its final response (a short reply on a busy
      // machine can finish within the first milliseconds), it is there whole.
      EXPECT_EQ(after, before);
      EXPECT_EQ(after_session.session().turns(), before_session.session().turns());
    }
    EXPECT_THAT(daemon_->log(), ::testing::Not(HasSubstr("unreadable")));
    EXPECT_TRUE(client->Chat(GreedyChat(id, "still there?")).ok());
  }
}

// A kill at random moments around the end of short turns: the session is always either exactly
// as before the turn or has the whole turn, and a reply the client received is never lost.
TEST_F(DurableSessionsTest, KillNineAroundTheCommitIsAtomic) {
  Start();
  std::string id;
  {
    auto client = Connect();
    id = NewSession(*client);
  }
  for (int delay_ms : {2, 4, 6, 8, 10, 14}) {
    SCOPED_TRACE(fmt::format("kill after {} ms", delay_ms));
    auto client = Connect();
    const v1::GetSessionResponse before = MustGet(*client, id);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      daemon_->Signal(SIGKILL);
    });
    auto reply = client->Chat(GreedyChat(id, kQuestions[static_cast<size_t>(delay_ms) % kQuestions.size()], 3));
    killer.join();
    ASSERT_TRUE(daemon_->Wait(std::chrono::seconds(10)).has_value());
    client.reset();
    Start();
    client = Connect();
    const v1::GetSessionResponse after = MustGet(*client, id);
    const bool has_turn = after.session().turns() == before.session().turns() + 1;
    if (reply.ok()) {
      EXPECT_TRUE(has_turn) << "a reply was received but its turn is gone";
    }
    if (!has_turn) {
      EXPECT_EQ(Tokens(after), Tokens(before));
      EXPECT_EQ(after.session().turns(), before.session().turns());
    }
    EXPECT_THAT(daemon_->log(), ::testing::Not(HasSubstr("unreadable")));
  }
}

// Sessions of several uids come back with their owners; other uids are still denied.
TEST_F(DurableSessionsTest, SessionsOfSeveralUidsComeBackWithTheirOwners) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to switch uids";
  Start();
  ASSERT_EQ(::chmod(socket_path().c_str(), 0666), 0);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0777), 0);
  const std::vector<uid_t> uids = {65531, 65532};
  // Each child creates two sessions with a turn and writes their ids to ids-<uid>.
  auto as_uid = [&](uid_t uid, const std::function<int(client::DaemonClient&)>& body) {
    pid_t child = ::fork();
    if (child == 0) {
      if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(10);
      auto connected = client::DaemonClient::Connect(socket_path().string());
      if (!connected.ok()) ::_exit(11);
      ::_exit(body(**connected));
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  };
  for (uid_t uid : uids) {
    ASSERT_EQ(as_uid(uid, [&](client::DaemonClient& c) {
      std::ofstream out(dir_.path() / fmt::format("ids-{}", uid));
      for (int i = 0; i < 2; ++i) {
        auto created = c.CreateSession(fmt::format("owner {}", uid));
        if (!created.ok() || !c.Chat(GreedyChat(created->session_id(), "hi", 2)).ok()) return 12;
        out << created->session_id() << "\n";
      }
      return 0;
    }), 0);
  }
  std::string root_session;
  {
    auto client = Connect();
    root_session = NewSession(*client, "owner 0");
    Reply(*client, root_session, "hi", 2);
  }
  Restart();
  ASSERT_EQ(::chmod(socket_path().c_str(), 0666), 0);
  for (uid_t uid : uids) {
    const uid_t other = uid == uids[0] ? uids[1] : uids[0];
    EXPECT_EQ(as_uid(uid, [&](client::DaemonClient& c) {
      std::ifstream in(dir_.path() / fmt::format("ids-{}", uid));
      std::ifstream theirs(dir_.path() / fmt::format("ids-{}", other));
      std::string mine1, mine2, their1;
      in >> mine1 >> mine2;
      theirs >> their1;
      auto listed = c.ListSessions();
      if (!listed.ok() || listed->sessions_size() != 2) return 20;
      for (const auto& info : listed->sessions()) {
        if (info.session_id() != mine1 && info.session_id() != mine2) return 21;
        if (info.system_prompt_text() != fmt::format("owner {}", uid) || info.turns() != 1) return 22;
      }
      if (!c.Chat(GreedyChat(mine1, "again", 2)).ok()) return 23;
      if (c.GetSession(their1).status().code() != common::StatusCode::kPermissionDenied) return 24;
      if (c.Chat(GreedyChat(their1, "let me in", 2)).status().code() != common::StatusCode::kPermissionDenied) return 25;
      if (c.DeleteSession(their1).status().code() != common::StatusCode::kPermissionDenied) return 26;
      if (c.GetSession(root_session).status().code() != common::StatusCode::kPermissionDenied) return 27;
      return 0;
    }), 0) << "uid " << uid << ": see the exit codes in the lambda";
  }
  auto client = Connect();
  auto listed = client->ListSessions();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sessions_size(), 1);  // root sees only its own
  EXPECT_EQ(listed->sessions(0).session_id(), root_session);
}

TEST_F(DurableSessionsTest, CorruptDatabaseIsMovedAsideAndAFreshOneUsed) {
  fs::create_directories(state_dir());
  const std::string garbage(8192, 'Z');
  testing::WriteFile(state_dir() / "sessions.db", garbage);
  Start();
  auto client = Connect();
  ASSERT_TRUE(client->Info().ok());  // answered once the state and the model are loaded
  const std::string log = daemon_->log();
  EXPECT_THAT(log, HasSubstr((state_dir() / "sessions.db").string() + " is unreadable"));
  std::vector<fs::path> moved;
  for (const auto& entry : fs::directory_iterator(state_dir())) {
    if (entry.path().filename().string().starts_with("sessions.db.corrupt-")) moved.push_back(entry.path());
  }
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_THAT(log, HasSubstr(moved[0].string()));
  EXPECT_EQ(testing::ReadFile(moved[0]), garbage);
  const std::string id = NewSession(*client);
  Reply(*client, id, "hi");
  client.reset();
  Restart();
  client = Connect();
  EXPECT_EQ(MustGet(*client, id).session().turns(), 1);
}

TEST_F(DurableSessionsTest, UnusableStateDirectoryIsAClearErrorAndEphemeralStillWorks) {
  testing::WriteFile(dir_.path() / "not-a-dir", "x");
  testing::DaemonProcessOptions options = DaemonOptions();
  options.extra_args = {"--threads", "1", "--state-dir", (dir_.path() / "not-a-dir" / "state").string()};
  options.wait_until_listening = false;
  daemon_ = testing::DaemonProcess::Start(options);
  const std::optional<int> code = daemon_->Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(daemon_->log(), HasSubstr((dir_.path() / "not-a-dir" / "state").string()));
  EXPECT_THAT(daemon_->log(), HasSubstr("--ephemeral"));
  // A second daemon on a state directory in use is refused too.
  Start();
  testing::DaemonProcessOptions second = Options();
  second.socket_path = dir_.path() / "second.sock";
  second.wait_until_listening = false;
  auto other = testing::DaemonProcess::Start(second);
  ASSERT_TRUE(other->Wait(std::chrono::seconds(30)).has_value());
  EXPECT_THAT(other->log(), HasSubstr("in use by another nielsd"));
}

TEST_F(DurableSessionsTest, SessionsOfAnotherModelAreListedAndRefused) {
  Start();
  std::string kept, dropped;
  {
    auto client = Connect();
    kept = NewSession(*client);
    dropped = NewSession(*client);
    Reply(*client, kept, "hi");
  }
  ASSERT_EQ(daemon_->Stop(), 0);
  const fs::path other_model = dir_.path() / "other-model";
  daemon::model::ModelConfig other_config = IntegrationConfig();
  other_config.name = "other";
  testing::WriteModelDir(other_model, other_config, kModelSeed + 1);
  testing::DaemonProcessOptions options = Options();
  options.model_dir = other_model;
  daemon_ = testing::DaemonProcess::Start(options);
  {
    auto client = Connect();
    auto listed = client->ListSessions();
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->sessions_size(), 2);
    for (const auto& info : listed->sessions()) {
      EXPECT_TRUE(info.other_model());
      EXPECT_EQ(info.model_name(), "tiny");
    }
    auto chat = client->Chat(GreedyChat(kept, "hi"));
    EXPECT_EQ(chat.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_THAT(chat.status().message(), HasSubstr("belongs to another model ('tiny')"));
    EXPECT_EQ(client->GetSession(kept).status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_EQ(client->ForkSession(kept).status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_TRUE(client->DeleteSession(dropped).ok());  // its owner may still delete it
  }
  ASSERT_EQ(daemon_->Stop(), 0);
  Start();  // the first model again: its session is intact
  auto client = Connect();
  EXPECT_EQ(MustGet(*client, kept).session().turns(), 1);
  EXPECT_EQ(client->GetSession(dropped).status().code(), common::StatusCode::kNotFound);
}

// At --max-sessions the least recently used idle session leaves memory instead of a refusal; it is
// loaded again, with its history, by the next request that names it.
TEST_F(DurableSessionsTest, SessionLimitUnloadsInsteadOfRefusing) {
  Start({"--max-sessions", "2"});
  auto client = Connect();
  const std::string first = NewSession(*client);
  Reply(*client, first, "hi", 3);
  const std::vector<int32_t> first_tokens = Tokens(MustGet(*client, first));
  const std::string second = NewSession(*client);
  const std::string third = NewSession(*client);  // first (least recently used) is unloaded
  ASSERT_FALSE(third.empty());
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions(), 2u);         // in memory
  EXPECT_EQ(stats->stored_sessions(), 3u);  // on disk
  EXPECT_EQ(Tokens(MustGet(*client, first)), first_tokens);
  EXPECT_TRUE(client->Chat(GreedyChat(first, "again", 3)).ok());
  auto listed = client->ListSessions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sessions_size(), 3);
}

// The turn must need a new database page whatever room the B-tree's pages have left: a session
// row that outgrows one page keeps the rest in overflow pages, which are always whole new pages.
// (A turn only a few times larger than a filler session could fit in the free half of a page left
// by a split, depending on where the random session ids fall, and so succeed now and then.)
TEST_F(DurableSessionsTest, FullDatabaseFailsTheTurnAndKeepsTheSession) {
  daemon::model::ModelConfig config = IntegrationConfig();
  config.context = 4096;  // room for a turn of about 2300 tokens: 9 KB of token ids, over two 4 KB pages
  testing::WriteModelDir(model_dir(), config, kModelSeed);
  Start({"--max-state-db-mb", "1", "--max-sessions-per-uid", "1024"});
  auto client = Connect();
  const std::string id = NewSession(*client);
  Reply(*client, id, "hi");
  const v1::GetSessionResponse before = MustGet(*client, id);
  // Fill the database with sessions carrying system prompts until it refuses one.
  std::string filler_prompt, long_text;
  for (int i = 0; i < 50; ++i) filler_prompt += fmt::format("word{} ", i);
  for (int i = 0; i < 400; ++i) long_text += fmt::format("word{} ", i);
  std::vector<std::string> fillers;
  common::Status status;
  for (int i = 0; i < 2000 && status.ok(); ++i) {
    auto created = client->CreateSession(filler_prompt);
    status = created.status();
    if (created.ok()) fillers.push_back(created->session_id());
  }
  ASSERT_EQ(status.code(), common::StatusCode::kResourceExhausted) << status.ToString();
  auto turn = client->Chat(GreedyChat(id, long_text));
  EXPECT_EQ(turn.status().code(), common::StatusCode::kResourceExhausted) << turn.status().ToString();
  EXPECT_EQ(Tokens(MustGet(*client, id)), Tokens(before));
  for (size_t i = 0; i < fillers.size() / 2; ++i) ASSERT_TRUE(client->DeleteSession(fillers[i]).ok());
  EXPECT_FALSE(Reply(*client, id, long_text).empty());  // the same turn fits again
  EXPECT_EQ(MustGet(*client, id).session().turns(), 2);
  EXPECT_GT(MustGet(*client, id).token_ids_size(), 1024);  // 4 KB of token ids: more than one page
}

TEST_F(DurableSessionsTest, UnusedSessionsExpireAfterTheTtl) {
  Start({"--session-ttl", "2"});
  std::string stored, loaded;
  {
    auto client = Connect();
    stored = NewSession(*client);
    Reply(*client, stored, "hi", 2);
  }
  ASSERT_EQ(daemon_->Stop(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  Start({"--session-ttl", "2"});  // expired while nielsd was down: deleted in the background
  auto client = Connect();
  loaded = NewSession(*client);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (client->GetSession(stored).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(client->GetSession(stored).status().code(), common::StatusCode::kNotFound);
  // A loaded session nobody uses expires too.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(client->GetSession(loaded).status().code(), common::StatusCode::kNotFound);
  auto listed = client->ListSessions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sessions_size(), 0);
}

// KV spill: sessions evicted from a small KV budget are read back from disk on their next turn
// (reused_tokens > 0) and reply exactly like a recompute; a damaged spill file is recomputed.
TEST_F(DurableSessionsTest, EvictedCacheIsReadBackAndADamagedSpillIsRecomputed) {
  std::string long_text;
  for (int i = 0; i < 120; ++i) long_text += fmt::format("line{} ", i);
  // The reference: every session's second reply on a daemon that recomputes (ephemeral, big budget).
  std::vector<std::string> reference;
  {
    testing::DaemonProcessOptions options = DaemonOptions();
    options.extra_args.push_back("--ephemeral");
    daemon_ = testing::DaemonProcess::Start(options);
    auto client = Connect();
    for (int s = 0; s < 5; ++s) {
      const std::string id = NewSession(*client, fmt::format("session {}", s));
      Reply(*client, id, long_text + fmt::format("{}", s), 4);
      reference.push_back(Reply(*client, id, "and?", 4));
    }
    ASSERT_EQ(daemon_->Stop(), 0);
  }
  Start({"--kv-budget-mb", "1"});
  auto client = Connect();
  std::vector<std::string> ids;
  for (int s = 0; s < 5; ++s) {
    ids.push_back(NewSession(*client, fmt::format("session {}", s)));
    Reply(*client, ids.back(), long_text + fmt::format("{}", s), 4);
  }
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  ASSERT_GT(stats->kv_spill_writes(), 0u) << "a 1 MiB budget must evict some of 5 long sessions";
  // Damage the spill file of session 0 (evicted first).
  const fs::path damaged = state_dir() / "kv" / (ids[0] + ".kv");
  ASSERT_TRUE(fs::exists(damaged));
  std::string bytes = testing::ReadFile(damaged);
  bytes[bytes.size() / 2] ^= 0x40;
  testing::WriteFile(damaged, bytes);

  auto first = client->Chat(GreedyChat(ids[0], "and?", 4));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->reply(), reference[0]);
  EXPECT_EQ(first->stats().reused_tokens(), 0);  // recomputed
  EXPECT_THAT(daemon_->log(), HasSubstr("checksum mismatch"));
  for (int s = 1; s < 5; ++s) {
    const uint64_t reads_before = client->Stats()->kv_spill_reads();
    auto reply = client->Chat(GreedyChat(ids[static_cast<size_t>(s)], "and?", 4));
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->reply(), reference[static_cast<size_t>(s)]) << s;
    if (client->Stats()->kv_spill_reads() > reads_before) {
      EXPECT_GT(reply->stats().reused_tokens(), 0) << s;  // the cache came from disk
    }
  }
  EXPECT_GT(client->Stats()->kv_spill_reads(), 0u);
}

// niels-chat keeps a conversation that got a reply; --resume continues it, across a restart.
TEST_F(DurableSessionsTest, NielsChatResumesAcrossARestart) {
  Start();
  auto chat = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {NIELS_CHAT_BINARY, "--socket", socket_path().string(), "--greedy",
                                     "--max-new-tokens", "4", "--system", "resume me", "--stats"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv);
  };
  auto first = chat({"-p", "hello there"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const size_t at = first.err.find("session=");
  ASSERT_NE(at, std::string::npos) << first.err;
  const std::string id = first.err.substr(at + 8, 32);
  auto unanswered = chat({});  // no input: the session it made got no turn and is deleted
  ASSERT_EQ(unanswered.exit_code, 0) << unanswered.err;
  Restart();
  auto second = chat({"--resume", "-p", "what is nielsd?"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("session=" + id));
  auto client = Connect();
  EXPECT_EQ(MustGet(*client, id).session().turns(), 2);
  auto listed = client->ListSessions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sessions_size(), 1);
  auto by_id = testing::RunProcess({NIELS_CHAT_BINARY, "--socket", socket_path().string(), "--greedy",
                                    "--max-new-tokens", "4", "--session", id, "-p", "thanks"});
  EXPECT_EQ(by_id.exit_code, 0) << by_id.err;
  EXPECT_EQ(MustGet(*client, id).session().turns(), 3);
}

}  // namespace
}  // namespace niels::integration
