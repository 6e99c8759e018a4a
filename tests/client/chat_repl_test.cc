#include "client/chat/chat_repl.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <string>
#include <vector>

#include "tests/client/fake_daemon.h"

namespace niels::client {
namespace {

using common::Status;
using common::StatusCode;
using testing_support::FakeDaemon;
using testing_support::FakeReply;
using testing_support::Send;

// A scripted daemon for chats: replies "echo: TEXT" (one token per character when streaming),
// "fail" -> INVALID_ARGUMENT, "die" -> closes the connection, "cancel me" -> asks the client to
// cancel (through `on_cancel_me`) and answers the Cancel with CANCELLED.
class EchoDaemon {
 public:
  std::function<void()> on_cancel_me;

  EchoDaemon() : fake_([this](const v1::Request& q) { return Answer(q); }) {}
  FakeDaemon& fake() { return fake_; }

 private:
  FakeReply Answer(const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    switch (q.kind_case()) {
      case v1::Request::kCreateSession:
        r.mutable_create_session()->set_session_id("s1");
        return Send({r});
      case v1::Request::kDeleteSession:
        r.mutable_delete_session();
        return Send({r});
      case v1::Request::kCancel: {
        r.mutable_cancel()->set_found(true);
        v1::Response cancelled = FakeDaemon::Reply(q.cancel().target_request_id());
        cancelled.mutable_error()->set_code(v1::CANCELLED);
        return Send({r, cancelled});
      }
      case v1::Request::kChat:
        break;
      default:
        return Send({r});
    }
    const std::string& text = q.chat().user_text();
    if (text == "die") return Send({}, /*close=*/true);
    if (text == "fail") {
      r.mutable_error()->set_code(v1::INVALID_ARGUMENT);
      r.mutable_error()->set_message("turn does not fit");
      return Send({r});
    }
    if (text == "cancel me") {
      on_cancel_me();
      v1::Response token = FakeDaemon::Reply(q.request_id());
      token.mutable_token()->set_text("par");
      return Send({token});
    }
    const std::string reply = "echo: " + text;
    std::vector<v1::Response> out;
    if (q.chat().stream()) {
      for (size_t i = 0; i < reply.size(); ++i) {
        v1::Response token = FakeDaemon::Reply(q.request_id());
        token.mutable_token()->set_index(static_cast<int>(i));
        token.mutable_token()->set_text(reply.substr(i, 1));
        out.push_back(token);
      }
    }
    r.mutable_chat()->set_reply(reply);
    r.mutable_chat()->set_stop_reason(v1::EOT);
    r.mutable_chat()->mutable_stats()->set_used_kv_cache(q.chat().use_kv_cache() || !q.chat().has_use_kv_cache());
    out.push_back(r);
    return Send(out);
  }

  FakeDaemon fake_;
};

struct ReplRun {
  int code;
  std::string out;
  std::string err;
  std::vector<v1::Request> requests;  // everything the daemon got, including the final delete
};

ReplRun RunLines(EchoDaemon& daemon, const std::string& input, ChatOptions options = {}) {
  auto client = DaemonClient::Connect(daemon.fake().path());
  EXPECT_TRUE(client.ok());
  std::ostringstream out, err;
  std::istringstream in(input);
  int code;
  {
    ChatRepl repl(client->get(), options, out, err);
    daemon.on_cancel_me = [&] { (*client)->RequestCancel(); };
    EXPECT_TRUE(repl.Start("sys prompt").ok());
    code = repl.RunLines(in);
  }
  return {code, out.str(), err.str(), daemon.fake().requests()};
}

std::vector<std::string> ChatTexts(const std::vector<v1::Request>& requests) {
  std::vector<std::string> texts;
  for (const auto& r : requests) {
    if (r.has_chat()) texts.push_back(r.chat().user_text());
  }
  return texts;
}

TEST(ChatReplTest, OneReplyPerNonEmptyLineUntilExit) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "hello\n\nworld\r\n/exit\nnot sent\n");
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(run.out, "echo: hello\necho: world\n");
  EXPECT_EQ(run.err, "");
  EXPECT_EQ(ChatTexts(run.requests), (std::vector<std::string>{"hello", "world"}));
  ASSERT_GE(run.requests.size(), 4u);
  EXPECT_EQ(run.requests.front().create_session().system_prompt(), "sys prompt");
  for (const auto& r : run.requests) {
    if (r.has_chat()) {
      EXPECT_EQ(r.chat().session_id(), "s1");
    }
  }
  // The session is deleted when the REPL ends.
  EXPECT_TRUE(run.requests.back().has_delete_session());
  EXPECT_EQ(run.requests.back().delete_session().session_id(), "s1");
}

TEST(ChatReplTest, EofEndsCleanly) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "only line");  // no trailing newline
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(run.out, "echo: only line\n");
}

TEST(ChatReplTest, FailedTurnIsReportedAndTheLoopContinues) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "a\nfail\nb\n");
  EXPECT_EQ(run.code, kExitTurnFailed);
  EXPECT_EQ(run.out, "echo: a\necho: b\n");
  EXPECT_EQ(run.err, "niels-chat: INVALID_ARGUMENT: turn does not fit\n");
}

TEST(ChatReplTest, InvalidUtf8LineIsSkipped) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "caf\xE9\nok\n");
  EXPECT_EQ(run.code, kExitTurnFailed);
  EXPECT_EQ(run.out, "echo: ok\n");
  EXPECT_EQ(ChatTexts(run.requests), (std::vector<std::string>{"ok"}));
}

TEST(ChatReplTest, LostDaemonStopsWithUnreachableCode) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "a\ndie\nnever\n");
  EXPECT_EQ(run.code, kExitUnreachable);
  EXPECT_EQ(run.out, "echo: a\n");
  EXPECT_NE(run.err.find("closed the connection"), std::string::npos) << run.err;
  EXPECT_EQ(ChatTexts(run.requests), (std::vector<std::string>{"a", "die"}));
}

TEST(ChatReplTest, StreamPrintsTheSameTextAndStatsGoToStderr) {
  EchoDaemon daemon;
  ChatOptions options;
  options.stream = true;
  options.stats = true;
  options.use_kv_cache = false;
  ReplRun run = RunLines(daemon, "hi\n", options);
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(run.out, "echo: hi\n");
  EXPECT_NE(run.err.find("niels-chat: stats: "), std::string::npos);
  EXPECT_NE(run.err.find("used_kv_cache=false"), std::string::npos) << run.err;
  ASSERT_EQ(ChatTexts(run.requests).size(), 1u);
  EXPECT_TRUE(run.requests[1].chat().stream());
  EXPECT_FALSE(run.requests[1].chat().use_kv_cache());
}

TEST(ChatReplTest, CancelledReplyPrintsNothingOnStdout) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "cancel me\nafter\n");
  EXPECT_EQ(run.code, kExitInterrupted);  // piped input stops at an interrupt
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "niels-chat: reply cancelled\n");
  bool saw_cancel = false;
  for (const auto& r : run.requests) {
    if (r.has_cancel()) {
      saw_cancel = true;
      EXPECT_EQ(r.cancel().target_request_id(), 2u);  // 1 was CreateSession
    }
  }
  EXPECT_TRUE(saw_cancel);
}

TEST(ChatReplTest, SigintDuringReplySendsCancel) {
  EchoDaemon daemon;
  auto client = DaemonClient::Connect(daemon.fake().path());
  ASSERT_TRUE(client.ok());
  std::ostringstream out, err;
  {
    ChatRepl repl(client->get(), ChatOptions{}, out, err);
    repl.InstallInterruptHandler();
    daemon.on_cancel_me = [] { ::raise(SIGINT); };  // as if Ctrl-C was pressed mid-reply
    ASSERT_TRUE(repl.Start("s").ok());
    EXPECT_EQ(repl.Turn("cancel me").code(), StatusCode::kCancelled);
    EXPECT_TRUE(repl.Turn("next").ok());
  }
  ::signal(SIGINT, SIG_DFL);
  EXPECT_EQ(out.str(), "echo: next\n");
}

TEST(ChatReplTest, OneShot) {
  EchoDaemon daemon;
  auto client = DaemonClient::Connect(daemon.fake().path());
  ASSERT_TRUE(client.ok());
  std::ostringstream out, err;
  ChatRepl repl(client->get(), ChatOptions{}, out, err);
  ASSERT_TRUE(repl.Start("s").ok());
  EXPECT_EQ(repl.RunOneShot("question"), kExitOk);
  EXPECT_EQ(out.str(), "echo: question\n");
  EXPECT_EQ(repl.RunOneShot("fail"), kExitTurnFailed);
}

TEST(UnreachableMessageTest, OneLineWithPathReasonAndHint) {
  const Status s = Status::Unavailable("cannot reach nielsd at /run/user/0/nielsd/nielsd.sock (No such file or directory)");
  EXPECT_EQ(UnreachableMessage("/run/user/0/nielsd/nielsd.sock", s, false),
            "niels-chat: cannot reach nielsd at /run/user/0/nielsd/nielsd.sock (No such file or directory); "
            "start it with `nielsd &` or `systemctl --user start nielsd.socket`");
  const Status sys = Status::Unavailable("cannot reach nielsd at /run/nielsd/nielsd.sock (Connection refused)");
  const std::string system_line = UnreachableMessage("/run/nielsd/nielsd.sock", sys, false);
  EXPECT_NE(system_line.find("(Connection refused)"), std::string::npos);
  EXPECT_NE(system_line.find("systemctl start nielsd.socket"), std::string::npos);
  const std::string flag_line = UnreachableMessage("/tmp/x.sock", Status::Unavailable("cannot reach nielsd at /tmp/x.sock (Permission denied)"), true);
  EXPECT_NE(flag_line.find("nielsd --socket /tmp/x.sock"), std::string::npos);
  for (const std::string& line : {system_line, flag_line}) EXPECT_EQ(line.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace niels::client
