// niels-chat driven as a process against a real nielsd: one-shot, piped lines (one reply each, in
// the same session), /exit, EOF, the unreachable-daemon message, --no-kv-cache reaching the daemon,
// --system-file precedence and the slash commands (/help /reset /system /stats, unknown ones). Expected replies come from the client library with the same
// parameters (greedy, so they are deterministic).
#include <algorithm>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

constexpr int kMaxNew = 6;
const std::string kSystem = "you are terse.";

class NielsChatTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    StartDaemon();
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
  }

  std::vector<std::string> Args(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {NIELS_CHAT_BINARY, "--socket", socket_path().string(), "--greedy",
                                     "--max-new-tokens", std::to_string(kMaxNew)};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // The replies a fresh session with `system` gives to `lines`, one turn each.
  std::vector<std::string> ExpectedReplies(const std::string& system, const std::vector<std::string>& lines) {
    auto created = client_->CreateSession(system);
    EXPECT_TRUE(created.ok());
    std::vector<std::string> replies;
    for (const std::string& line : lines) {
      auto reply = client_->Chat(GreedyChat(created->session_id(), line, kMaxNew));
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      replies.push_back(reply.ok() ? reply->reply() : "<error>");
    }
    EXPECT_TRUE(client_->DeleteSession(created->session_id()).ok());
    return replies;
  }

  std::unique_ptr<client::DaemonClient> client_;
};

std::string Lines(const std::vector<std::string>& replies) {
  std::string text;
  for (const std::string& reply : replies) text += reply + "\n";
  return text;
}

TEST_F(NielsChatTest, OneShotPrintsOnlyTheReply) {
  auto expected = ExpectedReplies(kSystem, {"hello there"});
  auto result = testing::RunProcess(Args({"--system", kSystem, "-p", "hello there"}));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, Lines(expected));
}

// --show-logprobs: the reply on stdout unchanged, one line per reply token on stderr (not dimmed:
// stderr is a pipe), each with its three best alternatives.
TEST_F(NielsChatTest, ShowLogprobsPrintsALinePerReplyToken) {
  auto created = client_->CreateSession(std::string(kSystem));
  ASSERT_TRUE(created.ok());
  auto expected = client_->Chat(GreedyChat(created->session_id(), "hello there", kMaxNew));
  ASSERT_TRUE(expected.ok());
  auto result = testing::RunProcess(Args({"--system", kSystem, "--show-logprobs", "-p", "hello there"}));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, expected->reply() + "\n");
  size_t lines = 0;
  for (size_t at = 0; (at = result.err.find("\n", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, static_cast<size_t>(expected->reply_ids_size())) << result.err;
  EXPECT_EQ(result.err.find("\x1b["), std::string::npos);
  size_t bars = 0;
  for (size_t at = 0; (at = result.err.find(" | ", at)) != std::string::npos; ++at) ++bars;
  EXPECT_EQ(bars, lines * 3) << result.err;  // niels-chat shows 3 alternatives
}

TEST_F(NielsChatTest, PipedLinesGetOneReplyEachInOneSession) {
  const std::vector<std::string> lines = {"hello there", "what is nielsd", "thanks"};
  auto expected = ExpectedReplies(kSystem, lines);
  // An empty line is ignored; EOF ends the chat cleanly.
  auto result = testing::RunProcess(Args({"--system", kSystem}), "hello there\n\nwhat is nielsd\nthanks\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, Lines(expected));
  // The conversation is kept (the daemon is durable): one session holding the three turns.
  auto listed = client_->ListSessions();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sessions_size(), 1);
  EXPECT_EQ(listed->sessions(0).turns(), 3);
  EXPECT_EQ(listed->sessions(0).system_prompt_text(), kSystem);
}

TEST_F(NielsChatTest, ExitCommandStopsReading) {
  auto expected = ExpectedReplies(kSystem, {"hello there"});
  auto result = testing::RunProcess(Args({"--system", kSystem}), "hello there\n/exit\nnever answered\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, Lines(expected));
}

TEST_F(NielsChatTest, UnreachableDaemonNamesThePathAndFails) {
  const std::string missing = (dir_.path() / "nobody-here.sock").string();
  auto result = testing::RunProcess({NIELS_CHAT_BINARY, "--socket", missing, "-p", "hi"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find(missing), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("nielsd"), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST_F(NielsChatTest, NoKvCacheReachesTheDaemon) {
  auto cached = testing::RunProcess(Args({"--system", kSystem, "--stats", "-p", "hello there"}));
  EXPECT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_NE(cached.err.find("used_kv_cache=true"), std::string::npos) << cached.err;
  auto uncached = testing::RunProcess(Args({"--system", kSystem, "--stats", "--no-kv-cache", "-p", "hello there"}));
  EXPECT_EQ(uncached.exit_code, 0) << uncached.err;
  EXPECT_NE(uncached.err.find("used_kv_cache=false"), std::string::npos) << uncached.err;
  EXPECT_EQ(uncached.out, cached.out);  // greedy: both paths give the same reply
}

TEST_F(NielsChatTest, SystemFileTakesPrecedenceOverSystemText) {
  const std::string file_prompt = "you answer questions about niels and nielsd, the local daemon, in detail.";
  testing::WriteFile(dir_.path() / "system.txt", file_prompt + "\n");
  auto file_tokens = client_->Tokenize(file_prompt);
  auto text_tokens = client_->Tokenize(kSystem);
  auto user_tokens = client_->Tokenize("hello there");
  ASSERT_TRUE(file_tokens.ok() && text_tokens.ok() && user_tokens.ok());
  ASSERT_NE(file_tokens->ids_size(), text_tokens->ids_size());
  auto result = testing::RunProcess(Args({"--system", kSystem, "--system-file",
                                          (dir_.path() / "system.txt").string(), "--stats", "-p",
                                          "hello there"}));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // prompt = [sys] system [eot] [usr] text [eot] [asst]
  const int64_t expected_prompt = file_tokens->ids_size() + user_tokens->ids_size() + 5;
  EXPECT_NE(result.err.find("prompt_tokens=" + std::to_string(expected_prompt) + " "), std::string::npos)
      << result.err;
  EXPECT_EQ(result.out, Lines(ExpectedReplies(file_prompt, {"hello there"})));
}

TEST_F(NielsChatTest, ResetClearsTheConversationAndKeepsTheSystemPrompt) {
  // After /reset the next line is answered like the first line of a fresh chat with kSystem.
  const auto first = ExpectedReplies(kSystem, {"hello there"});
  const auto fresh = ExpectedReplies(kSystem, {"what is nielsd"});
  auto system_tokens = client_->Tokenize(kSystem);
  auto user_tokens = client_->Tokenize("what is nielsd");
  ASSERT_TRUE(system_tokens.ok() && user_tokens.ok());
  auto result =
      testing::RunProcess(Args({"--system", kSystem, "--stats"}), "hello there\n/reset\nwhat is nielsd\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, first[0] + "\n" + fresh[0] + "\n");
  EXPECT_NE(result.err.find("conversation cleared"), std::string::npos) << result.err;
  // The second turn's prompt holds the system prompt and that turn only:
  // [sys] system [eot] [usr] text [eot] [asst].
  const int64_t system_span = system_tokens->ids_size() + 2;
  const int64_t prompt = system_span + user_tokens->ids_size() + 3;
  const size_t second = result.err.rfind("niels-chat: stats: ");
  ASSERT_NE(second, std::string::npos) << result.err;
  EXPECT_NE(result.err.find("prompt_tokens=" + std::to_string(prompt) + " ", second), std::string::npos)
      << result.err;
}

TEST_F(NielsChatTest, SystemCommandStartsOverWithTheNewPrompt) {
  const std::string other = "you answer questions about niels and nielsd, the local daemon, in detail.";
  const auto expected = ExpectedReplies(other, {"hello there"});
  auto other_tokens = client_->Tokenize(other);
  auto user_tokens = client_->Tokenize("hello there");
  ASSERT_TRUE(other_tokens.ok() && user_tokens.ok());
  auto result = testing::RunProcess(Args({"--system", kSystem, "--stats"}),
                                    "/system " + other + "\nhello there\n/system\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, Lines(expected));
  // The turn ran on a fresh session with the new prompt: [sys] other [eot] [usr] text [eot] [asst].
  const int64_t prompt = other_tokens->ids_size() + user_tokens->ids_size() + 5;
  EXPECT_NE(result.err.find("prompt_tokens=" + std::to_string(prompt) + " reused_tokens="), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("system prompt: " + other), std::string::npos) << result.err;
  // The replaced session never got a turn and was deleted; the new one is kept with its turn.
  auto listed = client_->ListSessions();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sessions_size(), 1);
  EXPECT_EQ(listed->sessions(0).system_prompt_text(), other);
  EXPECT_EQ(listed->sessions(0).turns(), 1);
}

TEST_F(NielsChatTest, StatsCommandTogglesTheStatsLine) {
  auto result =
      testing::RunProcess(Args({"--system", kSystem}), "hello there\n/stats\nthanks\n/stats\nbye\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 3) << result.out;
  size_t stats_lines = 0;
  for (size_t at = result.err.find("niels-chat: stats: "); at != std::string::npos;
       at = result.err.find("niels-chat: stats: ", at + 1)) {
    ++stats_lines;
  }
  EXPECT_EQ(stats_lines, 1u) << result.err;  // only the reply to "thanks"
  EXPECT_NE(result.err.find("stats on"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("stats off"), std::string::npos) << result.err;
}

TEST_F(NielsChatTest, HelpAndUnknownCommandsAreNotModelTurns) {
  auto before = client_->Stats();
  const auto expected = ExpectedReplies(kSystem, {"hello there"});
  auto one_turn = client_->Stats();
  auto result = testing::RunProcess(Args({"--system", kSystem}), "/help\n/frobnicate\nhello there\n");
  auto after = client_->Stats();
  ASSERT_TRUE(before.ok() && one_turn.ok() && after.ok());
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // Only the real line reached the model: one reply, the first turn's, and as many generated
  // tokens as that one turn took.
  EXPECT_EQ(result.out, Lines(expected));
  EXPECT_EQ(after->tokens_generated_total() - one_turn->tokens_generated_total(),
            one_turn->tokens_generated_total() - before->tokens_generated_total());
  EXPECT_NE(result.err.find("/reset"), std::string::npos) << result.err;  // the help text
  const std::string unknown = "niels-chat: unknown command /frobnicate";
  const size_t at = result.err.find(unknown);
  ASSERT_NE(at, std::string::npos) << result.err;
  const std::string unknown_line = result.err.substr(at, result.err.find('\n', at) - at);
  EXPECT_NE(unknown_line.find("/help"), std::string::npos) << unknown_line;
}

TEST_F(NielsChatTest, DoubleSlashSendsTextStartingWithASlash) {
  const auto expected = ExpectedReplies(kSystem, {"/etc is a directory"});
  auto result = testing::RunProcess(Args({"--system", kSystem}), "//etc is a directory\n");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, Lines(expected));
}

}  // namespace
}  // namespace niels::integration
