#include "client/chat/chat_repl.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "client/chat/tool_command.h"
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
  // Sessions GetSession and ListSessions know about (besides those created: "s1", "s2", ...).
  std::vector<v1::SessionInfo> stored;

  EchoDaemon() : fake_([this](const v1::Request& q) { return Answer(q); }) {}
  FakeDaemon& fake() { return fake_; }

 private:
  FakeReply Answer(const v1::Request& q) {
    v1::Response r = FakeDaemon::Reply(q.request_id());
    switch (q.kind_case()) {
      case v1::Request::kCreateSession:
        r.mutable_create_session()->set_session_id("s" + std::to_string(++created_));
        return Send({r});
      case v1::Request::kListSessions:
        r.mutable_list_sessions();
        for (const auto& info : stored) *r.mutable_list_sessions()->add_sessions() = info;
        return Send({r});
      case v1::Request::kGetSession:
        if (auto it = conversations_.find(q.get_session().session_id()); it != conversations_.end()) {
          r.mutable_get_session()->mutable_session()->set_session_id(it->first);
          auto* system = r.mutable_get_session()->add_messages();
          system->set_role("system");
          system->set_content("sys prompt");
          for (const auto& [user, reply] : it->second) {
            auto* u = r.mutable_get_session()->add_messages();
            u->set_role("user");
            u->set_content(user);
            auto* a = r.mutable_get_session()->add_messages();
            a->set_role("assistant");
            a->set_content(reply);
          }
          return Send({r});
        }
        for (const auto& info : stored) {
          if (info.session_id() == q.get_session().session_id()) {
            *r.mutable_get_session()->mutable_session() = info;
            return Send({r});
          }
        }
        r.mutable_error()->set_code(v1::NOT_FOUND);
        r.mutable_error()->set_message("unknown session " + q.get_session().session_id());
        return Send({r});
      case v1::Request::kDeleteSession:
        r.mutable_delete_session();
        return Send({r});
      case v1::Request::kResetSession:
        conversations_[q.reset_session().session_id()].clear();
        r.mutable_reset_session();
        return Send({r});
      case v1::Request::kRewindSession: {
        auto& turns = conversations_[q.rewind_session().session_id()];
        turns.resize(static_cast<size_t>(q.rewind_session().keep_messages() / 2));
        r.mutable_rewind_session()->set_messages(q.rewind_session().keep_messages());
        return Send({r});
      }
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
    // Tools: "weather?" makes a call; tool results are answered by what they said.
    if (text == "weather?" && q.chat().tools().tools_size() > 0) {
      v1::ToolCall& call = *r.mutable_chat()->add_tool_calls();
      call.set_id("call_1");
      call.set_name(q.chat().tools().tools(0).name());
      call.set_arguments(R"({"city": "Oslo"})");
      r.mutable_chat()->set_stop_reason(v1::TOOL_CALLS);
      return Send({r});
    }
    if (q.chat().messages_size() > 0 && q.chat().messages(0).role() == "tool") {
      r.mutable_chat()->set_reply("the tool said " + q.chat().messages(0).content());
      return Send({r});
    }
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
    // "think...": a reasoning model's reply, its reasoning streamed in two pieces before the answer.
    const bool reasons = text.starts_with("think");
    const std::string reasoning = reasons ? "let me see\nwhat " + text + " means" : "";
    if (q.chat().stream() && reasons) {
      for (const std::string& piece : {reasoning.substr(0, 5), reasoning.substr(5)}) {
        v1::Response token = FakeDaemon::Reply(q.request_id());
        token.mutable_token()->set_reasoning(piece);
        out.push_back(token);
      }
    }
    if (q.chat().stream()) {
      for (size_t i = 0; i < reply.size(); ++i) {
        v1::Response token = FakeDaemon::Reply(q.request_id());
        token.mutable_token()->set_index(static_cast<int>(i));
        token.mutable_token()->set_text(reply.substr(i, 1));
        out.push_back(token);
      }
    }
    conversations_[q.chat().session_id()].emplace_back(text, reply);
    r.mutable_chat()->set_reply(reply);
    r.mutable_chat()->set_reasoning(reasoning);
    r.mutable_chat()->set_stop_reason(v1::EOT);
    r.mutable_chat()->mutable_stats()->set_used_kv_cache(q.chat().use_kv_cache() || !q.chat().has_use_kv_cache());
    out.push_back(r);
    return Send(out);
  }

  int created_ = 0;
  // Per created session: its completed turns (user text, reply), as GetSession lists them.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> conversations_;
  FakeDaemon fake_;
};

struct ReplRun {
  int code;
  std::string out;
  std::string err;
  std::vector<v1::Request> requests;  // everything the daemon got, including the final delete
};

// Runs `input` through a REPL started with `start` (default: a new session with "sys prompt").
ReplRun RunLines(EchoDaemon& daemon, const std::string& input, ChatOptions options = {}, bool durable = false,
                 const std::function<Status(ChatRepl&)>& start = nullptr) {
  auto client = DaemonClient::Connect(daemon.fake().path());
  EXPECT_TRUE(client.ok());
  std::ostringstream out, err;
  std::istringstream in(input);
  int code = -1;
  {
    ChatRepl repl(client->get(), options, out, err);
    repl.SetDurable(durable);
    daemon.on_cancel_me = [&] { (*client)->RequestCancel(); };
    const Status started = start ? start(repl) : repl.Start("sys prompt");
    EXPECT_TRUE(started.ok()) << started.ToString();
    if (started.ok()) code = repl.RunLines(in);
  }
  return {code, out.str(), err.str(), daemon.fake().requests()};
}

std::vector<std::string> DeletedIds(const std::vector<v1::Request>& requests) {
  std::vector<std::string> ids;
  for (const auto& r : requests) {
    if (r.has_delete_session()) ids.push_back(r.delete_session().session_id());
  }
  return ids;
}

std::vector<std::string> ChatSessionIds(const std::vector<v1::Request>& requests) {
  std::vector<std::string> ids;
  for (const auto& r : requests) {
    if (r.has_chat()) ids.push_back(r.chat().session_id());
  }
  return ids;
}

v1::SessionInfo Stored(const std::string& id, std::optional<std::string> system, double last_used, int turns,
                       bool other_model = false) {
  v1::SessionInfo info;
  info.set_session_id(id);
  if (system) info.set_system_prompt_text(*system);
  info.set_has_system_prompt(system.has_value());
  info.set_last_used_unix_s(last_used);
  info.set_turns(turns);
  info.set_other_model(other_model);
  info.set_model_name(other_model ? "old-model" : "tiny");
  return info;
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

// A reasoning model's reasoning comes before the answer (between <think> lines when stdout is not a
// terminal), streamed or not, and --hide-reasoning leaves only the answer; --no-think is sent.
TEST(ChatReplTest, ReasoningIsShownBeforeTheAnswerOrHidden) {
  for (const bool stream : {false, true}) {
    EchoDaemon daemon;
    ChatOptions options;
    options.stream = stream;
    ReplRun run = RunLines(daemon, "think hard\nhi\n", options);
    EXPECT_EQ(run.code, kExitOk);
    EXPECT_EQ(run.out, "<think>\nlet me see\nwhat think hard means\n</think>\n\necho: think hard\necho: hi\n")
        << "stream " << stream;

    EchoDaemon quiet;
    options.hide_reasoning = true;
    options.enable_thinking = false;
    run = RunLines(quiet, "think hard\n", options);
    EXPECT_EQ(run.out, "echo: think hard\n") << "stream " << stream;
    ASSERT_EQ(ChatTexts(run.requests).size(), 1u);
    EXPECT_TRUE(run.requests[1].chat().has_enable_thinking());
    EXPECT_FALSE(run.requests[1].chat().enable_thinking());
  }
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

// /retry sends the last message again after dropping its turn, /edit sends new text in its place,
// /undo only drops it; with no turn they say so and send nothing.
TEST(ChatReplTest, RetryEditAndUndoRewindTheLastTurn) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "/undo\none\ntwo\n/retry\n/edit deux\n/undo\n/undo\n/undo\nthree\n");
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(ChatTexts(run.requests), (std::vector<std::string>{"one", "two", "two", "deux", "three"}));
  std::vector<int> rewinds;
  for (const auto& r : run.requests) {
    if (r.has_rewind_session()) rewinds.push_back(r.rewind_session().keep_messages());
  }
  // /retry and /edit drop turn 2 (keep 2 messages); the /undos drop "deux", then "one"; the last finds none.
  EXPECT_EQ(rewinds, (std::vector<int>{2, 2, 2, 0}));
  EXPECT_EQ(run.out, "echo: one\necho: two\necho: two\necho: deux\necho: three\n");
  EXPECT_NE(run.err.find("niels-chat: last turn undone"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("the conversation has no turn yet"), std::string::npos) << run.err;
}

// Options with one tool, get_weather (what --tools FILE gives).
ChatOptions WeatherToolOptions() {
  ChatOptions options;
  auto tools = ParseOpenAiTools(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])", "test");
  EXPECT_TRUE(tools.ok()) << tools.status().ToString();
  if (tools.ok()) options.tools = *tools;
  return options;
}

// --tools: the tools go with every turn; a call is shown, its result read from input and sent back
// as a tool message with the call's id, and the model's next reply printed.
TEST(ChatReplTest, ToolCallsAreShownAndTheirResultsSentBack) {
  EchoDaemon daemon;
  auto client = DaemonClient::Connect(daemon.fake().path());
  ASSERT_TRUE(client.ok());
  const ChatOptions options = WeatherToolOptions();
  std::ostringstream out, err;
  std::istringstream in("weather?\n21 degrees\n");
  {
    ChatRepl repl(client->get(), options, out, err);
    repl.SetToolResultReader([&in](const v1::ToolCall&) -> std::optional<std::string> {
      std::string line;
      if (!std::getline(in, line)) return std::nullopt;
      return line;
    });
    ASSERT_TRUE(repl.Start("sys prompt").ok());
    EXPECT_EQ(repl.RunLines(in), kExitOk);
  }
  EXPECT_NE(err.str().find(R"([tool call get_weather {"city": "Oslo"} (id call_1)])"), std::string::npos) << err.str();
  EXPECT_NE(out.str().find("the tool said 21 degrees"), std::string::npos) << out.str();
  std::vector<v1::ChatRequest> chats;
  for (const v1::Request& r : daemon.fake().requests()) {
    if (r.has_chat()) chats.push_back(r.chat());
  }
  ASSERT_EQ(chats.size(), 2u);
  EXPECT_EQ(chats[0].tools().tools(0).name(), "get_weather");
  EXPECT_EQ(chats[0].tools().tools(0).parameters(), R"({"type":"object"})");
  ASSERT_EQ(chats[1].messages_size(), 1);
  EXPECT_EQ(chats[1].messages(0).role(), "tool");
  EXPECT_EQ(chats[1].messages(0).tool_call_id(), "call_1");
  EXPECT_EQ(chats[1].messages(0).content(), "21 degrees");
  EXPECT_EQ(chats[1].user_text(), "");
}

// --tool-exec: a real /bin/sh command answers the call; its stdout goes back as the tool message.
TEST(ChatReplTest, ToolExecRunsTheCommandAndSendsItsOutputBack) {
  EchoDaemon daemon;
  auto client = DaemonClient::Connect(daemon.fake().path());
  ASSERT_TRUE(client.ok());
  const ChatOptions options = WeatherToolOptions();
  std::ostringstream out, err;
  std::istringstream in("weather?\n");
  {
    ChatRepl repl(client->get(), options, out, err);
    repl.SetToolResultReader(ToolCommandReader(R"(printf '%s %s ' "$NIELS_TOOL_NAME" "$NIELS_TOOL_CALL_ID"; cat)",
                                               &ChatRepl::InterruptedOutsideReply, err));
    ASSERT_TRUE(repl.Start("sys prompt").ok());
    EXPECT_EQ(repl.RunLines(in), kExitOk) << err.str();
  }
  const std::string result = R"(get_weather call_1 {"city": "Oslo"})";
  EXPECT_NE(out.str().find("the tool said " + result), std::string::npos) << out.str();
  EXPECT_NE(err.str().find("[tool result " + std::to_string(result.size()) + " bytes, exit status 0]"),
            std::string::npos) << err.str();
  std::vector<v1::ChatRequest> chats;
  for (const v1::Request& r : daemon.fake().requests()) {
    if (r.has_chat()) chats.push_back(r.chat());
  }
  ASSERT_EQ(chats.size(), 2u);
  ASSERT_EQ(chats[1].messages_size(), 1);
  EXPECT_EQ(chats[1].messages(0).tool_call_id(), "call_1");
  EXPECT_EQ(chats[1].messages(0).content(), result);
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

// With a durable daemon a conversation that got a reply is kept; one that never did is deleted.
TEST(ChatReplSessionsTest, DurableDaemonKeepsConversationsWithTurnsOnly) {
  EchoDaemon with_turns;
  ReplRun kept = RunLines(with_turns, "hello\n", {}, /*durable=*/true);
  EXPECT_EQ(kept.code, kExitOk);
  EXPECT_TRUE(DeletedIds(kept.requests).empty());

  EchoDaemon without;
  ReplRun empty = RunLines(without, "/help\n", {}, /*durable=*/true);
  EXPECT_EQ(DeletedIds(empty.requests), (std::vector<std::string>{"s1"}));

  EchoDaemon reset;  // /reset empties it again: nothing worth keeping
  ReplRun cleared = RunLines(reset, "hello\n/reset\n", {}, /*durable=*/true);
  EXPECT_EQ(DeletedIds(cleared.requests), (std::vector<std::string>{"s1"}));

  EchoDaemon failed;  // a failed turn is no turn
  ReplRun none = RunLines(failed, "fail\n", {}, /*durable=*/true);
  EXPECT_EQ(DeletedIds(none.requests), (std::vector<std::string>{"s1"}));
}

TEST(ChatReplSessionsTest, NewKeepsThePreviousConversationAndSessionShowsTheId) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "one\n/session\n/new\n/session\ntwo\n/new\n", {}, /*durable=*/true);
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(ChatSessionIds(run.requests), (std::vector<std::string>{"s1", "s2"}));
  // s1 and s2 hold a turn each and are kept; s3 never got one and goes at exit.
  EXPECT_EQ(DeletedIds(run.requests), (std::vector<std::string>{"s3"}));
  EXPECT_NE(run.err.find("niels-chat: session s1 (1 turn; continue it later with niels-chat --session s1)"),
            std::string::npos) << run.err;
  EXPECT_NE(run.err.find("niels-chat: session s2 (0 turns;"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("the previous conversation is kept as session s1"), std::string::npos) << run.err;
  // Every new session has the same system prompt.
  for (const auto& r : run.requests) {
    if (r.has_create_session()) {
      EXPECT_EQ(r.create_session().system_prompt(), "sys prompt");
    }
  }
}

TEST(ChatReplSessionsTest, EphemeralDaemonGetsItsSessionsDeleted) {
  EchoDaemon daemon;
  ReplRun run = RunLines(daemon, "one\n/new\ntwo\n", {}, /*durable=*/false);
  EXPECT_EQ(DeletedIds(run.requests), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(run.err.find("kept"), std::string::npos) << run.err;
}

TEST(ChatReplSessionsTest, ContinueUsesTheSessionAndNeverDeletesIt) {
  EchoDaemon daemon;
  daemon.stored = {Stored("abc", "pirate", 5.0, 3)};
  ReplRun run = RunLines(daemon, "more\n/reset\n", {}, /*durable=*/false,
                         [](ChatRepl& repl) { return repl.Continue("abc"); });
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(ChatSessionIds(run.requests), (std::vector<std::string>{"abc"}));
  EXPECT_TRUE(DeletedIds(run.requests).empty());  // not ours to delete, even emptied
  for (const auto& r : run.requests) EXPECT_FALSE(r.has_create_session());
}

TEST(ChatReplSessionsTest, ContinueRefusesUnknownAndOtherModelSessions) {
  EchoDaemon daemon;
  daemon.stored = {Stored("old", "pirate", 5.0, 3, /*other_model=*/true)};
  auto client = DaemonClient::Connect(daemon.fake().path());
  ASSERT_TRUE(client.ok());
  std::ostringstream out, err;
  ChatRepl repl(client->get(), ChatOptions{}, out, err);
  EXPECT_EQ(repl.Continue("nope").code(), StatusCode::kNotFound);
  const Status other = repl.Continue("old");
  EXPECT_EQ(other.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.message().find("another model (old-model)"), std::string::npos) << other.message();
}

TEST(ChatReplSessionsTest, ResumePicksTheMostRecentWithTheSameSystemPrompt) {
  EchoDaemon daemon;
  daemon.stored = {Stored("older", "sys prompt", 10.0, 2), Stored("newer", "sys prompt", 20.0, 1),
                   Stored("other-prompt", "pirate", 30.0, 4), Stored("no-prompt", std::nullopt, 40.0, 1),
                   Stored("other-model", "sys prompt", 50.0, 1, /*other_model=*/true)};
  ReplRun run = RunLines(daemon, "again\n", {}, /*durable=*/true,
                         [](ChatRepl& repl) { return repl.Resume("sys prompt"); });
  EXPECT_EQ(run.code, kExitOk);
  EXPECT_EQ(ChatSessionIds(run.requests), (std::vector<std::string>{"newer"}));

  EchoDaemon empty;
  ReplRun fresh = RunLines(empty, "first\n", {}, /*durable=*/true,
                           [](ChatRepl& repl) { return repl.Resume("sys prompt"); });
  EXPECT_EQ(ChatSessionIds(fresh.requests), (std::vector<std::string>{"s1"}));
  EXPECT_NE(fresh.err.find("no earlier conversation"), std::string::npos) << fresh.err;
}

TEST(ChatReplSessionsTest, StatsLineNamesTheSession) {
  EchoDaemon daemon;
  ChatOptions options;
  options.stats = true;
  ReplRun run = RunLines(daemon, "hi\n", options);
  EXPECT_NE(run.err.find(" session=s1\n"), std::string::npos) << run.err;
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
