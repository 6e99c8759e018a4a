// nielsd-system-prompt-bench: what a long system prompt costs a chat, measured through a
// RUNNING nielsd's socket as a client sees it. It starts nothing itself: bench/vs_llamacpp.py
// system-prompt starts nielsd on a Qwen3-0.6B-shaped model with the real tokenizer and runs it.
//
// For each length in --system-tokens (default 100,6000): a system prompt of about that many tokens
// (deterministic English-like text, different in every round so that no round finds another's
// blocks in nielsd's prefix cache, cut with the daemon's own Tokenize/Detokenize), a session made
// with it (CreateSession prefills the system prompt: its time and length are the system prompt's
// prefill), then --turns chat turns (a short user message each, greedy, --reply-tokens streamed
// tokens with the end-of-turn ids banned so that every reply has the same length). Per turn:
// time to first token as the client sees it (call to first TokenEvent) and as the daemon counts it
// (GenerationStats), tokens prefilled and reused. With --rounds R the lengths alternate R times
// (short, long, short, long...: a slow minute on a shared machine hits both alike).
//
// Summary per length: the system prompt's prefill tokens/s (session length after CreateSession /
// the CreateSession call's time), turn 1's time to first token, and the median time to first token
// of turns 2..N (the cached path: only the new turn is prefilled); then the ratio of the longest length's
// median to the shortest's (the target for a long system prompt: <= 1.5x).
//
// Output: a table, or with --json one JSON line per figure:
//   {"bench":"system_prompt","system_tokens":N,"round":r,"turn":t,"ttft_ms":X,"daemon_ttft_ms":X,
//    "prefilled":N,"reused":N,"prompt_tokens":N}
//   {"bench":"system_prompt_create","system_tokens":N,"round":r,"session_length":N,"create_ms":X}
//   {"bench":"system_prompt_summary","system_tokens":N,"system_prefill_tokens":N,
//    "system_prefill_tok_s":X,"first_turn_ttft_ms":X,"later_turns_ttft_ms":X,
//    "later_turns_daemon_ttft_ms":X}
//   {"bench":"system_prompt_ratio","long":N,"short":N,"ratio":X,"daemon_ratio":X}
// Links only the client library and common (no libtorch).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
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
  std::vector<int> system_tokens = {100, 6000};
  int turns = 6;
  int reply_tokens = 16;
  int rounds = 1;
  std::vector<int> banned_ids;  // the model's end-of-turn ids (random weights would stop on them)
  bool json = false;
};

[[noreturn]] void Fail(const std::string& what, const common::Status& status) {
  std::fprintf(stderr, "nielsd-system-prompt-bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

// About `tokens` tokens of English-like text: seeded words, cut to `tokens` ids by the daemon's
// tokenizer and turned back into text (which re-tokenizes to that count, give or take a few).
std::string SystemPrompt(DaemonClient& client, int tokens, int round) {
  static const char* const kWords[] = {
      "the",     "assistant", "answers", "questions", "about",   "orders",  "shipping", "returns", "and",
      "refunds", "politely",  "never",   "reveals",   "private", "data",    "always",   "checks",  "the",
      "account", "before",    "making",  "changes",   "to",      "a",       "customer", "record",  "when",
      "unsure",  "it",        "asks",    "for",       "more",    "details", "rule",     "policy",  "section"};
  std::mt19937 rng(static_cast<uint32_t>(tokens) * 131u + static_cast<uint32_t>(round));
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string text = "You are a support assistant. Follow these rules.\n";
  for (int i = 0; i < tokens * 2; ++i) {
    text += kWords[pick(rng)];
    text += (i % 17 == 16) ? ".\n" : " ";
  }
  auto ids = client.Tokenize(text);
  if (!ids.ok()) Fail("Tokenize", ids.status());
  std::vector<int32_t> cut(ids->ids().begin(), ids->ids().begin() + std::min(tokens, ids->ids_size()));
  auto back = client.Detokenize(cut);
  if (!back.ok()) Fail("Detokenize", back.status());
  return back->text();
}

struct Turn {
  double ttft_ms = 0, daemon_ttft_ms = 0;
  int64_t prefilled = 0, reused = 0, prompt_tokens = 0;
};

struct Created {
  int64_t length = 0;
  double ms = 0;
};

std::vector<Turn> RunChat(const Options& o, DaemonClient& client, const std::string& system, Created* made) {
  const Clock::time_point create_start = Clock::now();
  auto created = client.CreateSession(system);
  if (!created.ok()) Fail("CreateSession", created.status());
  *made = {created->length(), Ms(Clock::now() - create_start)};
  const std::string session = created->session_id();
  std::vector<Turn> turns;
  for (int t = 0; t < o.turns; ++t) {
    v1::ChatRequest request;
    request.set_session_id(session);
    request.set_user_text("Question " + std::to_string(t + 1) +
                          ": my parcel has not arrived yet, what should I do about order " +
                          std::to_string(1000 + 7 * t) + "?");
    request.set_max_new_tokens(o.reply_tokens);
    request.set_stream(true);
    request.set_enable_thinking(false);
    request.mutable_sampling()->set_temperature(0.0f);
    for (int id : o.banned_ids) request.mutable_sampling()->add_banned_ids(id);
    const Clock::time_point start = Clock::now();
    Clock::time_point first{};
    auto reply = client.Chat(request, [&](const v1::TokenEvent&) {
      if (first == Clock::time_point{}) first = Clock::now();
    });
    if (!reply.ok()) Fail("Chat", reply.status());
    const v1::GenerationStats& s = reply->stats();
    turns.push_back({Ms(first - start), s.time_to_first_token_ms(), s.prefilled_tokens(), s.reused_tokens(),
                     s.prompt_tokens()});
  }
  (void)client.DeleteSession(session);
  return turns;
}

double Median(std::vector<double> v) { return v.empty() ? 0.0 : Quantile(std::move(v), 0.5); }

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"nielsd-system-prompt-bench: time to first token with a short and a long system prompt, through a "
               "running nielsd"};
  app.add_option("--socket", o.socket, "nielsd's socket")->required();
  app.add_option("--system-tokens", o.system_tokens, "system prompt lengths in tokens")->capture_default_str();
  app.add_option("--turns", o.turns, "chat turns per session")->check(CLI::Range(2, 1000))->capture_default_str();
  app.add_option("--reply-tokens", o.reply_tokens, "tokens per reply")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "sessions per length, lengths alternating")->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--ban", o.banned_ids, "ids never sampled (the model's end-of-turn ids)");
  app.add_flag("--json", o.json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);
  if (o.system_tokens.empty()) o.system_tokens = {100, 6000};
  std::sort(o.system_tokens.begin(), o.system_tokens.end());

  auto connected = DaemonClient::Connect(o.socket);
  if (!connected.ok()) Fail("connect", connected.status());
  DaemonClient& client = **connected;
  std::map<int, std::vector<Turn>> first_turns, later_turns;
  std::map<int, std::vector<Created>> creates;
  for (int round = 0; round < o.rounds; ++round) {
    for (int n : o.system_tokens) {
      Created made;
      const std::vector<Turn> turns = RunChat(o, client, SystemPrompt(client, n, round), &made);
      creates[n].push_back(made);
      if (o.json) {
        std::printf("{\"bench\":\"system_prompt_create\",\"system_tokens\":%d,\"round\":%d,\"session_length\":%lld,"
                    "\"create_ms\":%.3f}\n",
                    n, round + 1, (long long)made.length, made.ms);
      } else {
        std::printf("system %5d  round %d  CreateSession %8.1f ms (%lld tokens)\n", n, round + 1, made.ms,
                    (long long)made.length);
      }
      for (size_t t = 0; t < turns.size(); ++t) {
        (t == 0 ? first_turns : later_turns)[n].push_back(turns[t]);
        const Turn& x = turns[t];
        if (o.json) {
          std::printf("{\"bench\":\"system_prompt\",\"system_tokens\":%d,\"round\":%d,\"turn\":%zu,\"ttft_ms\":%.3f,"
                      "\"daemon_ttft_ms\":%.3f,\"prefilled\":%lld,\"reused\":%lld,\"prompt_tokens\":%lld}\n",
                      n, round + 1, t + 1, x.ttft_ms, x.daemon_ttft_ms, (long long)x.prefilled, (long long)x.reused,
                      (long long)x.prompt_tokens);
        } else {
          std::printf("system %5d  round %d  turn %2zu  ttft %8.1f ms (daemon %8.1f)  prefilled %5lld  reused %5lld\n",
                      n, round + 1, t + 1, x.ttft_ms, x.daemon_ttft_ms, (long long)x.prefilled, (long long)x.reused);
        }
      }
    }
  }

  std::map<int, double> later_ms, later_daemon_ms;
  for (int n : o.system_tokens) {
    std::vector<double> rate, ttft, daemon_ttft, lengths, first_ttft;
    for (const Created& c : creates[n]) {
      rate.push_back(static_cast<double>(c.length) / (c.ms / 1e3));
      lengths.push_back(static_cast<double>(c.length));
    }
    for (const Turn& t : first_turns[n]) first_ttft.push_back(t.ttft_ms);
    for (const Turn& t : later_turns[n]) ttft.push_back(t.ttft_ms), daemon_ttft.push_back(t.daemon_ttft_ms);
    later_ms[n] = Median(ttft);
    later_daemon_ms[n] = Median(daemon_ttft);
    if (o.json) {
      std::printf("{\"bench\":\"system_prompt_summary\",\"system_tokens\":%d,\"system_prefill_tokens\":%.0f,"
                  "\"system_prefill_tok_s\":%.2f,\"first_turn_ttft_ms\":%.3f,\"later_turns_ttft_ms\":%.3f,"
                  "\"later_turns_daemon_ttft_ms\":%.3f}\n",
                  n, Median(lengths), Median(rate), Median(first_ttft), later_ms[n], later_daemon_ms[n]);
    } else {
      std::printf("system %5d: system prompt %5.0f tokens prefilled at %8.1f tokens/s; turn 1 ttft %8.1f ms; turns "
                  "2..%d ttft median %8.1f ms (daemon %8.1f)\n",
                  n, Median(lengths), Median(rate), Median(first_ttft), o.turns, later_ms[n], later_daemon_ms[n]);
    }
  }
  const int shortest = o.system_tokens.front(), longest = o.system_tokens.back();
  if (shortest != longest) {
    const double ratio = later_ms[longest] / later_ms[shortest];
    const double daemon_ratio = later_daemon_ms[longest] / later_daemon_ms[shortest];
    if (o.json) {
      std::printf("{\"bench\":\"system_prompt_ratio\",\"long\":%d,\"short\":%d,\"ratio\":%.3f,\"daemon_ratio\":%.3f}\n",
                  longest, shortest, ratio, daemon_ratio);
    } else {
      std::printf("turns 2..%d ttft, %d vs %d system tokens: %.2fx (daemon %.2fx; target <= 1.5x)\n", o.turns,
                  longest, shortest, ratio, daemon_ratio);
    }
  }
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
