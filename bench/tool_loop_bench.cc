// nielsd-tool-loop-bench: what a tool-using agent's follow-up turns cost, measured through a
// RUNNING nielsd's socket as a client sees it. It starts nothing itself: bench/vs_llamacpp.py
// tool-loop starts nielsd on a Qwen3-0.6B-shaped model with the real tokenizer and chat template
// and runs it.
//
// One session with a system prompt and one tool (get_weather), then --turns rounds of the loop an
// agent runs:
//   call      a user question with tool_choice naming the tool: the reply is a call (greedy, held
//             to the tool's schema);
//   result    the tool's result (a JSON object of about --result-tokens tokens) as a tool message,
//             tool_choice none: the reply that answers it, --reply-tokens streamed tokens;
//   plain     beside it, in a second session of the same tools and another system prompt (so that
//             neither finds the other's blocks in the prefix index), a plain user message whose
//             turn prefills as many tokens as the result turn did (after a warm-up turn; the
//             words' count is set from the previous turn's overhead, the first turn calibrates): what the same
//             new tokens cost without a tool in the loop. Both answers are tool_choice none.
// Per turn: time to first token as the client sees it (call to first TokenEvent) and as the daemon
// counts it, tokens prefilled and reused, the ids of the turn's new contents alone (tool results or
// user text, by Tokenize: what prefilled beyond them is the template's wrapping and what it rendered
// differently from the cached reply), for the result and the plain turn; the ratio of their
// medians over the turns after the first (the target: the result turn within 1.2x of the plain
// one). The end-of-turn ids are
// banned (--ban) so that every reply has the same length. Every turn runs with enable_thinking
// false, or true with --thinking: then Qwen3's template renders back the reasoning of the messages
// after the last user query (the call's, in the result turn) and leaves out that of earlier ones.
//
// Output: a table, or with --json one JSON line per figure:
//   {"bench":"tool_loop","turn":t,"kind":"call"|"result"|"plain","ttft_ms":X,"daemon_ttft_ms":X,
//    "prefilled":N,"reused":N,"prompt_tokens":N,"content_tokens":N}
//   {"bench":"tool_loop_summary","thinking":B,"result_ttft_ms":X,"plain_ttft_ms":X,"ratio":X,"daemon_ratio":X,
//    "result_prefilled":N,"plain_prefilled":N}
// Links only the client library and common (no libtorch).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_stats.h"
#include "client/daemon_client.h"

namespace niels::bench {
namespace {

using client::DaemonClient;
using Clock = std::chrono::steady_clock;
namespace v1 = ::niels::v1;

struct Options {
  std::string socket;
  int turns = 6;
  int reply_tokens = 16;
  int call_tokens = 48;
  int result_tokens = 60;
  std::vector<int> banned_ids;
  bool thinking = false;
  bool json = false;
};

[[noreturn]] void Fail(const std::string& what, const common::Status& status) {
  std::fprintf(stderr, "nielsd-tool-loop-bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

struct Measured {
  double ttft_ms = 0, daemon_ttft_ms = 0;
  int64_t prefilled = 0, reused = 0, prompt_tokens = 0;
  int64_t content_tokens = 0;  // the new message contents' own ids (the tool results, the user text)
};

v1::ChatRequest Base(const Options& o, const std::string& session, int max_new_tokens) {
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_max_new_tokens(max_new_tokens);
  request.set_stream(true);
  request.set_enable_thinking(o.thinking);
  request.mutable_sampling()->set_temperature(0.0f);
  for (int id : o.banned_ids) request.mutable_sampling()->add_banned_ids(id);
  return request;
}

Measured Run(DaemonClient& client, const v1::ChatRequest& request, v1::ChatResponse* response = nullptr) {
  const Clock::time_point start = Clock::now();
  Clock::time_point first{};
  auto reply = client.Chat(request, [&](const v1::TokenEvent&) {
    if (first == Clock::time_point{}) first = Clock::now();
  });
  if (!reply.ok()) Fail("Chat", reply.status());
  if (first == Clock::time_point{}) first = Clock::now();
  const v1::GenerationStats& s = reply->stats();
  if (response != nullptr) *response = *reply;
  return {Ms(first - start), s.time_to_first_token_ms(), s.prefilled_tokens(), s.reused_tokens(), s.prompt_tokens()};
}

// How many ids `text` has on its own.
int64_t Tokens(DaemonClient& client, const std::string& text) {
  auto ids = client.Tokenize(text);
  if (!ids.ok()) Fail("Tokenize", ids.status());
  return ids->ids_size();
}

// The tool's result for turn t: a JSON object of about `tokens` tokens (a forecast of numbers).
std::string Result(int t, int tokens) {
  std::string text = "{\"city\": \"City " + std::to_string(t) + "\", \"forecast\": [";
  for (int i = 0; i < tokens / 4; ++i) text += (i ? ", " : "") + std::to_string((t * 7 + i * 3) % 31);
  return text + "]}";
}

// A plain user message of `words` words.
std::string Words(int t, int words) {
  static const char* const kWords[] = {"please", "tell", "me", "more", "about", "the", "weather", "today",
                                       "and", "tomorrow", "in", "this", "city", "thanks", "again", "now"};
  std::string text = "Turn " + std::to_string(t) + ":";
  for (int i = 0; i < words; ++i) text += std::string(" ") + kWords[(t + i) % std::size(kWords)];
  return text;
}

void Print(const Options& o, int turn, const char* kind, const Measured& m) {
  if (o.json) {
    std::printf("{\"bench\":\"tool_loop\",\"turn\":%d,\"kind\":\"%s\",\"ttft_ms\":%.3f,\"daemon_ttft_ms\":%.3f,"
                "\"prefilled\":%lld,\"reused\":%lld,\"prompt_tokens\":%lld,\"content_tokens\":%lld}\n",
                turn, kind, m.ttft_ms, m.daemon_ttft_ms, (long long)m.prefilled, (long long)m.reused,
                (long long)m.prompt_tokens, (long long)m.content_tokens);
  } else {
    std::printf("turn %2d  %-6s  ttft %8.1f ms (daemon %8.1f)  prefilled %5lld  reused %5lld  prompt %5lld  "
                "new contents %5lld\n",
                turn, kind, m.ttft_ms, m.daemon_ttft_ms, (long long)m.prefilled, (long long)m.reused,
                (long long)m.prompt_tokens, (long long)m.content_tokens);
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"nielsd-tool-loop-bench: follow-up turns of a tool loop against plain turns, through a running nielsd"};
  app.add_option("--socket", o.socket, "nielsd's socket")->required();
  app.add_option("--turns", o.turns, "rounds of call, result and plain turn")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--reply-tokens", o.reply_tokens, "tokens per answer")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--call-tokens", o.call_tokens, "the most tokens of a call")->check(CLI::Range(8, 4096))
      ->capture_default_str();
  app.add_option("--result-tokens", o.result_tokens, "about how many tokens a tool result has")
      ->check(CLI::Range(8, 8192))->capture_default_str();
  app.add_option("--ban", o.banned_ids, "ids never sampled in answers (the model's end-of-turn ids)");
  app.add_flag("--thinking", o.thinking, "every turn with enable_thinking (the model reasons before its call and answers)");
  app.add_flag("--json", o.json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);

  auto connected = DaemonClient::Connect(o.socket);
  if (!connected.ok()) Fail("connect", connected.status());
  DaemonClient& client = **connected;
  v1::ToolSet tools;
  v1::Tool& tool = *tools.add_tools();
  tool.set_name("get_weather");
  tool.set_description("The weather forecast of a city for the next days");
  tool.set_parameters(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},)"
                      R"( "required": ["city"]})");
  const auto create = [&](const std::string& system) {
    auto created = client.CreateSession(system, tools);
    if (!created.ok()) Fail("CreateSession", created.status());
    return created->session_id();
  };
  const std::string session = create(
      "You are a weather assistant. Call get_weather for every city you are asked about, then answer from its "
      "result.");
  const std::string plain_session = create(
      "You are a weather assistant who answers from what the user tells you; call get_weather only when asked to.");

  std::vector<double> result_ttft, plain_ttft, result_daemon, plain_daemon, result_prefilled, plain_prefilled;
  // The plain session's first turn prefills its whole prompt; one warm-up turn makes its later
  // turns like the loop's. Then each plain turn prefills about its words plus `plain_offset`
  // (wrappers, and the previous answer as the template renders it again), measured turn by turn.
  {
    v1::ChatRequest warm_up = Base(o, plain_session, o.reply_tokens);
    warm_up.set_user_text("Hello.");
    warm_up.mutable_tool_choice()->set_mode(v1::ToolChoice::NONE);
    Run(client, warm_up);
  }
  int64_t plain_offset = 30;
  for (int t = 1; t <= o.turns; ++t) {
    v1::ChatRequest call = Base(o, session, o.call_tokens);
    call.clear_sampling();  // the call is held to the schema; its end must not be banned
    call.mutable_sampling()->set_temperature(0.0f);
    call.set_user_text("What is the weather in City " + std::to_string(t) + "?");
    call.mutable_tool_choice()->set_mode(v1::ToolChoice::NAMED);
    call.mutable_tool_choice()->set_name("get_weather");
    v1::ChatResponse called;
    Measured call_turn = Run(client, call, &called);
    call_turn.content_tokens = Tokens(client, call.user_text());
    Print(o, t, "call", call_turn);
    if (called.tool_calls_size() == 0) {
      std::fprintf(stderr, "nielsd-tool-loop-bench: turn %d: the forced reply made no call (stop reason %d)\n", t,
                   called.stop_reason());
      return 1;
    }
    v1::ChatRequest answer = Base(o, session, o.reply_tokens);
    answer.mutable_tool_choice()->set_mode(v1::ToolChoice::NONE);
    for (const v1::ToolCall& made : called.tool_calls()) {
      v1::ChatMessage& result = *answer.add_messages();
      result.set_role("tool");
      result.set_tool_call_id(made.id());
      result.set_content(Result(t, o.result_tokens));
    }
    Measured with_result = Run(client, answer);
    for (const v1::ChatMessage& result : answer.messages()) with_result.content_tokens += Tokens(client, result.content());
    Print(o, t, "result", with_result);

    const int words = static_cast<int>(std::max<int64_t>(1, with_result.prefilled - plain_offset));
    v1::ChatRequest plain_request = Base(o, plain_session, o.reply_tokens);
    plain_request.set_user_text(Words(t, words));
    plain_request.mutable_tool_choice()->set_mode(v1::ToolChoice::NONE);
    Measured plain = Run(client, plain_request);
    plain.content_tokens = Tokens(client, plain_request.user_text());
    Print(o, t, "plain", plain);
    plain_offset = plain.prefilled - words;
    if (t == 1 && o.turns > 1) continue;  // calibrates plain_offset
    result_ttft.push_back(with_result.ttft_ms);
    plain_ttft.push_back(plain.ttft_ms);
    result_daemon.push_back(with_result.daemon_ttft_ms);
    plain_daemon.push_back(plain.daemon_ttft_ms);
    result_prefilled.push_back(static_cast<double>(with_result.prefilled));
    plain_prefilled.push_back(static_cast<double>(plain.prefilled));
  }
  (void)client.DeleteSession(plain_session);
  (void)client.DeleteSession(session);
  auto median = [](std::vector<double> v) { return Quantile(std::move(v), 0.5); };
  const double ratio = median(result_ttft) / median(plain_ttft);
  const double daemon_ratio = median(result_daemon) / median(plain_daemon);
  if (o.json) {
    std::printf("{\"bench\":\"tool_loop_summary\",\"thinking\":%s,\"result_ttft_ms\":%.3f,\"plain_ttft_ms\":%.3f,\"ratio\":%.3f,"
                "\"daemon_ratio\":%.3f,\"result_prefilled\":%.0f,\"plain_prefilled\":%.0f}\n",
                o.thinking ? "true" : "false", median(result_ttft), median(plain_ttft), ratio, daemon_ratio,
                median(result_prefilled), median(plain_prefilled));
  } else {
    std::printf("turns 2..: median ttft: result turn %.1f ms, plain turn %.1f ms: %.2fx (daemon %.2fx; target <= 1.2x); "
                "median prefilled %.0f vs %.0f\n",
                median(result_ttft), median(plain_ttft), ratio, daemon_ratio, median(result_prefilled),
                median(plain_prefilled));
  }
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
