// nielsd-kv-bench: the paged KV pool of a RUNNING nielsd, measured through its socket as users see
// it (start nielsd first; README.md, "Benchmarks", shows how to serve a random-weight model).
//
// shared-prefix: --sessions sessions are created with the same system prompt of --system-tokens
//   tokens, then each chats one turn of --turn-tokens tokens ([usr] text [eot] [asst]) with a reply
//   of --reply-tokens. Prints the KV bytes the daemon holds (Stats: used blocks x block bytes)
//   against the ideal (one copy of the prompt + every session's own tokens), the tokens each
//   first turn prefilled and reused, and the time to first token of the first turns.
// fork: KV blocks before and after ForkSession, and after one turn on the fork.
// long-chat: a --chat-turns turn chat (the daemon's default system prompt, user turns of
//   --turn-tokens, replies of --reply-tokens). After every cached turn the same prompt (the tokens
//   the turn conditioned on, after any truncation) is run uncached (use_kv_cache = false, one new
//   token, a fresh session) for the uncached time to first token at the same length. --repeats
//   chats; per turn the medians. Summary: the first turn that hit the context limit, the mean time
//   to first token before and after it, the worst cached/uncached ratio, and the re-prefill rate of
//   the truncating turns against the uncached full forward's rate at the same length.
//
// Output: tables, or with --json one JSON line per figure. Random weights: replies never end on eot
// by themselves (eot is banned anyway). Links only the client library and common (no libtorch).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_stats.h"
#include "client/daemon_client.h"
#include "common/socket_path.h"

namespace niels::bench {
namespace {

using client::DaemonClient;
namespace v1 = ::niels::v1;

struct Options {
  std::string socket;
  int sessions = 100;
  int system_tokens = 400;
  int turn_tokens = 40;
  int reply_tokens = 40;
  int chat_turns = 30;
  int repeats = 3;
  bool shared_prefix = true;
  bool fork = true;
  bool long_chat = true;
  bool json = false;
};

[[noreturn]] void Fail(const std::string& what, const common::Status& status) {
  std::fprintf(stderr, "nielsd-kv-bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T Must(common::StatusOr<T> result, const char* what) {
  if (!result.ok()) Fail(what, result.status());
  return std::move(result).value();
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Words to build texts of a given token count from.
const std::vector<std::string>& Words() {
  static const std::vector<std::string> words = [] {
    std::istringstream in(
        "nielsd is a small local inference daemon that keeps one model in memory and serves many chat "
        "sessions over a unix socket with protocol buffers each session keeps its token history and the "
        "keys and values of every layer in blocks of a shared pool so that a system prompt used by many "
        "sessions is stored once and a fork costs nothing until one of the branches writes the daemon "
        "drops the oldest turns of a long chat when it reaches the context of the model and keeps the "
        "system prompt so that the next turns stay fast users run it as a systemd service and talk to it "
        "with the terminal client or a short python script that sends requests and reads the replies");
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }();
  return words;
}

// A text whose encoding is `tokens` ids (or as close below as the words allow), starting at word
// `offset` of the list.
std::string TextOfTokens(DaemonClient& client, int tokens, size_t offset) {
  const auto& words = Words();
  auto count = [&](const std::string& text) {
    return static_cast<int>(Must(client.Tokenize(text), "Tokenize").ids_size());
  };
  std::string text;
  for (size_t i = offset;; ++i) {
    std::string longer = text.empty() ? words[i % words.size()] : text + " " + words[i % words.size()];
    if (count(longer) > tokens) break;
    text = std::move(longer);
  }
  // Top up with short words until exact (each adds one or two ids).
  for (const char* filler : {"a", "i", "o", "x"}) {
    while (count(text) < tokens && count(text + " " + filler) <= tokens) text += std::string(" ") + filler;
  }
  return text;
}

v1::ChatRequest GreedyChat(const std::string& session, const std::string& text, int reply_tokens, int32_t eot,
                           bool use_kv_cache = true) {
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_user_text(text);
  request.set_max_new_tokens(reply_tokens);
  request.set_use_kv_cache(use_kv_cache);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_sampling()->add_banned_ids(eot);
  return request;
}

struct Printer {
  bool json;
  void Figure(const char* bench, const char* metric, double value, const char* unit, int turn = 0) const {
    if (!json) return;
    std::printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.4f, \"unit\": \"%s\"", bench, metric, value, unit);
    if (turn > 0) std::printf(", \"turn\": %d", turn);
    std::printf("}\n");
  }
};

void SharedPrefix(DaemonClient& client, const v1::InfoResponse& info, const Options& o, const Printer& out) {
  const std::string system = TextOfTokens(client, o.system_tokens - 2, 0);  // + [sys] ... [eot]
  const std::string user = TextOfTokens(client, o.turn_tokens - 3, 17);    // + [usr] [eot] [asst]
  const v1::StatsResponse start = Must(client.Stats(), "Stats");
  std::vector<std::string> ids;
  std::vector<double> create_ms;
  for (int i = 0; i < o.sessions; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ids.push_back(Must(client.CreateSession(system), "CreateSession").session_id());
    create_ms.push_back(Ms(std::chrono::steady_clock::now() - t0));
  }
  const int64_t prompt = Must(client.GetSession(ids[0]), "GetSession").session().length();
  const v1::StatsResponse created = Must(client.Stats(), "Stats");
  std::vector<double> ttft, prefilled, reused;
  for (const std::string& id : ids) {
    const v1::ChatResponse reply = Must(client.Chat(GreedyChat(id, user, o.reply_tokens, info.eot_id())), "Chat");
    ttft.push_back(reply.stats().time_to_first_token_ms());
    prefilled.push_back(static_cast<double>(reply.stats().prefilled_tokens()));
    reused.push_back(static_cast<double>(reply.stats().reused_tokens()));
  }
  const v1::StatsResponse end = Must(client.Stats(), "Stats");
  int64_t own_tokens = 0;  // each session's cached positions past the prompt
  for (const std::string& id : ids) own_tokens += Must(client.GetSession(id), "GetSession").session().cached_tokens() - prompt;
  const double token_bytes = static_cast<double>(end.kv_block_bytes()) / end.kv_block_tokens();
  const double ideal = (static_cast<double>(prompt) + static_cast<double>(own_tokens)) * token_bytes;
  const double held = static_cast<double>(end.kv_bytes() - start.kv_bytes());
  const double unshared = (static_cast<double>(prompt) * o.sessions + static_cast<double>(own_tokens)) * token_bytes;
  const double first_create = create_ms[0];
  create_ms.erase(create_ms.begin());
  if (!out.json) {
    std::printf("shared-prefix: %d sessions, system prompt %ld tokens, turn %d tokens, reply %d tokens\n", o.sessions,
                static_cast<long>(prompt), o.turn_tokens, o.reply_tokens);
    std::printf("  KV held          %10.2f MiB (%u blocks of %lu bytes, %u shared)\n", held / (1 << 20),
                end.kv_blocks_used() - start.kv_blocks_used(), static_cast<unsigned long>(end.kv_block_bytes()),
                end.kv_blocks_shared());
    std::printf("  ideal            %10.2f MiB (one prompt + %ld own tokens)  ratio %.3f (target <= 1.1)\n",
                ideal / (1 << 20), static_cast<long>(own_tokens), held / ideal);
    std::printf("  without sharing  %10.2f MiB (%.1fx the held bytes)\n", unshared / (1 << 20), unshared / held);
    std::printf("  after creating   %u blocks used; prefix hits %lu tokens; create ms: first %.1f, others median %.1f\n",
                created.kv_blocks_used() - start.kv_blocks_used(),
                static_cast<unsigned long>(created.prefix_hit_tokens() - start.prefix_hit_tokens()), first_create,
                Quantile(create_ms, 0.5));
    std::printf("  first turns      prefilled median %.0f (min %.0f max %.0f), reused median %.0f (min %.0f)\n",
                Quantile(prefilled, 0.5), Quantile(prefilled, 0), Quantile(prefilled, 1), Quantile(reused, 0.5),
                Quantile(reused, 0));
    std::printf("  first-turn TTFT  median %.1f ms, p90 %.1f ms, max %.1f ms, session 1 %.1f ms\n", Quantile(ttft, 0.5),
                Quantile(ttft, 0.9), Quantile(ttft, 1), ttft[0]);
    std::printf("  daemon prefix hit rate %.3f\n", end.prefix_hit_rate());
  }
  out.Figure("shared_prefix", "kv_bytes", held, "bytes");
  out.Figure("shared_prefix", "kv_bytes_ideal", ideal, "bytes");
  out.Figure("shared_prefix", "kv_ratio", held / ideal, "x");
  out.Figure("shared_prefix", "first_turn_prefilled_median", Quantile(prefilled, 0.5), "tokens");
  out.Figure("shared_prefix", "first_turn_prefilled_max", Quantile(prefilled, 1), "tokens");
  out.Figure("shared_prefix", "first_turn_ttft_median", Quantile(ttft, 0.5), "ms");
  out.Figure("shared_prefix", "first_turn_ttft_p90", Quantile(ttft, 0.9), "ms");
  for (const std::string& id : ids) Must(client.DeleteSession(id), "DeleteSession");
}

void Fork(DaemonClient& client, const v1::InfoResponse& info, const Options& o, const Printer& out) {
  const std::string user = TextOfTokens(client, o.turn_tokens - 3, 5);
  const std::string parent = Must(client.CreateSession(std::nullopt), "CreateSession").session_id();
  for (int t = 0; t < 3; ++t) Must(client.Chat(GreedyChat(parent, user, o.reply_tokens, info.eot_id())), "Chat");
  const v1::StatsResponse before = Must(client.Stats(), "Stats");
  const std::string child = Must(client.ForkSession(parent), "ForkSession").session_id();
  const v1::StatsResponse forked = Must(client.Stats(), "Stats");
  Must(client.Chat(GreedyChat(child, user, o.reply_tokens, info.eot_id())), "Chat");
  const v1::StatsResponse turned = Must(client.Stats(), "Stats");
  const v1::GetSessionResponse child_info = Must(client.GetSession(child), "GetSession");
  const int64_t grown = static_cast<int64_t>(forked.kv_blocks_used()) - before.kv_blocks_used();
  if (!out.json) {
    std::printf("fork: parent of %ld tokens holds %u blocks; fork adds %ld blocks (%ld bytes; target <= 1 block); "
                "one %d+%d-token turn on the fork adds %ld blocks (%ld own, %ld shared with the parent)\n",
                static_cast<long>(Must(client.GetSession(parent), "GetSession").session().length()),
                before.kv_blocks_used(), static_cast<long>(grown),
                static_cast<long>(forked.kv_bytes()) - static_cast<long>(before.kv_bytes()), o.turn_tokens,
                o.reply_tokens, static_cast<long>(turned.kv_blocks_used()) - static_cast<long>(forked.kv_blocks_used()),
                static_cast<long>(child_info.session().kv_own_blocks()),
                static_cast<long>(child_info.session().kv_shared_blocks()));
  }
  out.Figure("fork", "blocks_added_by_fork", static_cast<double>(grown), "blocks");
  Must(client.DeleteSession(child), "DeleteSession");
  Must(client.DeleteSession(parent), "DeleteSession");
}

struct TurnFigures {
  std::vector<double> length, truncated, cached_ttft, prefilled, uncached_ttft;
};

// One chat of o.chat_turns turns; appends each turn's figures.
void OneLongChat(DaemonClient& client, const v1::InfoResponse& info, const Options& o,
                 const std::vector<std::string>& texts, std::vector<TurnFigures>& turns) {
  const std::string session = Must(client.CreateSession(info.default_system_prompt()), "CreateSession").session_id();
  for (int t = 0; t < o.chat_turns; ++t) {
    const v1::ChatResponse reply =
        Must(client.Chat(GreedyChat(session, texts[static_cast<size_t>(t) % texts.size()], o.reply_tokens, info.eot_id())),
             "Chat");
    const int64_t prompt_tokens = reply.stats().prompt_tokens();
    // The same prompt through the uncached path: a full forward over it for the first token.
    const v1::GetSessionResponse history = Must(client.GetSession(session), "GetSession");
    const std::string fresh = Must(client.CreateSession(std::nullopt), "CreateSession").session_id();
    v1::GenerateRequest uncached;
    uncached.set_session_id(fresh);
    uncached.mutable_input_ids()->Add(history.token_ids().begin(), history.token_ids().begin() + prompt_tokens);
    uncached.set_max_new_tokens(1);
    uncached.set_use_kv_cache(false);
    uncached.mutable_sampling()->set_temperature(0.0f);
    const v1::GenerateResponse full = Must(client.Generate(uncached), "Generate");
    Must(client.DeleteSession(fresh), "DeleteSession");
    TurnFigures& f = turns[static_cast<size_t>(t)];
    f.length.push_back(static_cast<double>(prompt_tokens));
    f.truncated.push_back(reply.truncated_turns());
    f.cached_ttft.push_back(reply.stats().time_to_first_token_ms());
    f.prefilled.push_back(static_cast<double>(reply.stats().prefilled_tokens()));
    f.uncached_ttft.push_back(full.stats().time_to_first_token_ms());
  }
  Must(client.DeleteSession(session), "DeleteSession");
}

void LongChat(DaemonClient& client, const v1::InfoResponse& info, const Options& o, const Printer& out) {
  std::vector<std::string> texts;
  for (size_t k = 0; k < 7; ++k) texts.push_back(TextOfTokens(client, o.turn_tokens - 3, 11 * k + 3));
  std::vector<TurnFigures> turns(static_cast<size_t>(o.chat_turns));
  for (int r = 0; r < o.repeats; ++r) OneLongChat(client, info, o, texts, turns);
  if (!out.json) {
    std::printf("long-chat: %d turns of %d + %d tokens, T %ld, medians of %d chats\n", o.chat_turns, o.turn_tokens,
                o.reply_tokens, static_cast<long>(info.context()), o.repeats);
    std::printf("%4s %7s %9s | %11s %9s | %13s | %6s\n", "turn", "prompt", "truncated", "cached TTFT", "prefilled",
                "uncached TTFT", "ratio");
  }
  int first_limit = 0;  // 1-based turn of the first truncation
  std::vector<double> before, after, rates_reprefill, rates_uncached;
  double worst_ratio = 0;
  for (int t = 0; t < o.chat_turns; ++t) {
    const TurnFigures& f = turns[static_cast<size_t>(t)];
    const double c = Quantile(f.cached_ttft, 0.5), u = Quantile(f.uncached_ttft, 0.5);
    const double truncated = Quantile(f.truncated, 0.5);
    if (truncated > 0 && first_limit == 0) first_limit = t + 1;
    (first_limit == 0 ? before : after).push_back(c);
    worst_ratio = std::max(worst_ratio, c / u);
    if (truncated > 0) {
      rates_reprefill.push_back(Quantile(f.prefilled, 0.5) / c * 1000.0);
      rates_uncached.push_back(Quantile(f.length, 0.5) / u * 1000.0);
    }
    if (!out.json) {
      std::printf("%4d %7.0f %9.0f | %9.1fms %9.0f | %11.1fms | %5.2fx\n", t + 1, Quantile(f.length, 0.5), truncated, c,
                  Quantile(f.prefilled, 0.5), u, c / u);
    }
    out.Figure("long_chat", "cached_ttft_ms", c, "ms", t + 1);
    out.Figure("long_chat", "uncached_ttft_ms", u, "ms", t + 1);
    out.Figure("long_chat", "prefilled_tokens", Quantile(f.prefilled, 0.5), "tokens", t + 1);
  }
  const double mean_before = Mean(before), mean_after = Mean(after);
  if (!out.json) {
    if (first_limit == 0) {
      std::printf("  the chat never reached the context limit\n");
    } else {
      std::printf("  first truncation at turn %d; mean cached TTFT before %.1f ms, after %.1f ms: %.2fx (target <= 3x)\n",
                  first_limit, mean_before, mean_after, mean_after / mean_before);
      std::printf("  worst cached/uncached TTFT ratio at the same length %.2fx (target <= 1)\n", worst_ratio);
      std::printf("  re-prefill on truncating turns: median %.0f tok/s; uncached full forward at the same length "
                  "%.0f tok/s\n", Quantile(rates_reprefill, 0.5), Quantile(rates_uncached, 0.5));
    }
  }
  out.Figure("long_chat", "first_truncated_turn", first_limit, "turn");
  out.Figure("long_chat", "mean_ttft_before_limit", mean_before, "ms");
  out.Figure("long_chat", "mean_ttft_after_limit", mean_after, "ms");
  out.Figure("long_chat", "worst_cached_uncached_ratio", worst_ratio, "x");
  if (!rates_reprefill.empty()) {
    out.Figure("long_chat", "reprefill_tok_s", Quantile(rates_reprefill, 0.5), "tok/s");
    out.Figure("long_chat", "uncached_tok_s", Quantile(rates_uncached, 0.5), "tok/s");
  }
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) {
  using namespace niels::bench;
  Options o;
  CLI::App app{"nielsd-kv-bench: shared-prefix KV memory, fork cost and a long chat past the context limit, "
               "through a running nielsd's socket"};
  app.add_option("--socket", o.socket, "the daemon's socket (default: as niels-chat finds it)");
  app.add_option("--sessions", o.sessions, "shared-prefix: sessions")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--system-tokens", o.system_tokens, "shared-prefix: system prompt tokens")
      ->check(CLI::Range(3, 100000))->capture_default_str();
  app.add_option("--turn-tokens", o.turn_tokens, "user turn tokens ([usr] text [eot] [asst])")
      ->check(CLI::Range(4, 100000))->capture_default_str();
  app.add_option("--reply-tokens", o.reply_tokens, "tokens per reply")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--chat-turns", o.chat_turns, "long-chat: turns")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--repeats", o.repeats, "long-chat: chats (medians per turn)")->check(CLI::Range(1, 100))->capture_default_str();
  bool no_shared = false, no_fork = false, no_long = false;
  app.add_flag("--no-shared-prefix", no_shared, "skip the shared-prefix part");
  app.add_flag("--no-fork", no_fork, "skip the fork part");
  app.add_flag("--no-long-chat", no_long, "skip the long-chat part");
  app.add_flag("--json", o.json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);
  o.shared_prefix = !no_shared, o.fork = !no_fork, o.long_chat = !no_long;

  if (o.socket.empty()) {
    auto path = niels::common::ResolveSocketPath("", niels::common::SocketEnv::FromProcess());
    if (!path.ok()) Fail("socket path", path.status());
    o.socket = *path;
  }
  auto client = Must(DaemonClient::Connect(o.socket), "connect");
  const niels::v1::InfoResponse info = Must(client->Info(), "Info");
  const Printer out{o.json};
  if (!o.json) {
    std::printf("nielsd-kv-bench: model %s (T %ld, %ld layers, width %ld)\n", info.model_name().c_str(),
                static_cast<long>(info.context()), static_cast<long>(info.layers()), static_cast<long>(info.width()));
  }
  if (o.shared_prefix) SharedPrefix(*client, info, o, out);
  if (o.fork) Fork(*client, info, o, out);
  if (o.long_chat) LongChat(*client, info, o, out);
  return 0;
}
