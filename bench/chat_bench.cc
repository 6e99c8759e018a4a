// nielsd-chat-bench: what a chat user feels, measured through the real Engine (sessions, template,
// KV cache, generation loop) on a random model of the `personal` or `base` shape.
//
// Runs the same N-turn greedy chat three ways per repeat and prints per turn the medians over
// --repeats of time to first token, tokens prefilled, tokens reused from the cache, and the session
// length:
//   cached     the default: a follow-up turn prefills only its new tokens;
//   uncached   use_kv_cache = false (niels-chat --no-kv-cache): a full forward per token;
//   reprefill  what the original Python CLI did: every turn builds the whole prompt (history + the
//              new turn) and prefills it into a fresh cache (here: a raw Generate on a new session
//              of a caller of its own: prefix blocks are reused per uid, so it finds none).
// The cached path's time to first token stays flat while the others grow with the history. With
// --json every figure is one JSON line {"metric", "value", "unit", "preset", "turn", "path"}.
//
// Random weights: replies never end on eot by themselves, so every reply runs to --reply-tokens.

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/defaults.h"
#include "daemon/engine/engine.h"
#include "daemon/handlers/service.h"
#include "daemon/kernels/heap_tuning.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"

namespace niels::bench {
namespace {

namespace v1 = niels::v1;
using daemon::engine::Engine;
using daemon::engine::EngineOptions;
using daemon::handlers::Service;
using daemon::server::Caller;
using daemon::server::Job;
using daemon::server::ResponseSink;
using daemon::model::ModelConfig;

// Blocks until the final response of one request.
class WaitingSink : public ResponseSink {
 public:
  bool Send(v1::Response response, bool final) override {
    if (!final) return true;
    std::lock_guard lock(mutex_);
    final_ = std::move(response);
    done_ = true;
    cv_.notify_all();
    return true;
  }
  v1::Response Wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    return final_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  v1::Response final_;
};

constexpr uint32_t kChatUid = 1000;

v1::Response Call(Service& engine, v1::Request request, uint32_t uid = kChatUid) {
  static uint64_t next_id = 1;
  request.set_request_id(next_id++);
  auto sink = std::make_shared<WaitingSink>();
  engine.Submit(Job{Caller{uid}, std::move(request), std::make_shared<std::atomic<bool>>(false), sink});
  v1::Response response = sink->Wait();
  if (response.has_error()) {
    std::fprintf(stderr, "nielsd-chat-bench: %s\n", response.error().message().c_str());
    std::exit(1);
  }
  return response;
}

struct TurnFigures {
  std::vector<double> ttft_ms, prefilled, reused, length;
};

enum class Path { kCached, kUncached, kReprefill };

// The original CLI's turn: the session's whole history plus the new user turn, prefilled into a
// fresh cache (a new session without system prompt, raw Generate), then reply_tokens generated. The
// fresh session belongs to a uid used for nothing else: a session of the chat's own uid would find
// the history's blocks in the prefix index and prefill only the new turn, like the cached path.
v1::GenerateResponse ReprefillTurn(Service& engine, const std::string& session, const std::string& text,
                                   int reply_tokens) {
  v1::Request info_request;
  info_request.mutable_info();
  const v1::InfoResponse info = Call(engine, info_request).info();
  v1::Request get;
  get.mutable_get_session()->set_session_id(session);
  const v1::GetSessionResponse history = Call(engine, get).get_session();
  v1::Request tokenize;
  tokenize.mutable_tokenize()->set_text(text);
  const v1::TokenizeResponse user = Call(engine, tokenize).tokenize();

  static uint32_t next_uid = kChatUid + 1;
  const uint32_t uid = next_uid++;
  v1::Request create;
  create.mutable_create_session();
  const std::string fresh = Call(engine, create, uid).create_session().session_id();
  v1::Request request;
  v1::GenerateRequest* generate = request.mutable_generate();
  generate->set_session_id(fresh);
  generate->mutable_input_ids()->Add(history.token_ids().begin(), history.token_ids().end());
  generate->add_input_ids(info.usr_id());
  generate->mutable_input_ids()->Add(user.ids().begin(), user.ids().end());
  generate->add_input_ids(info.eot_id());
  generate->add_input_ids(info.asst_id());
  generate->set_max_new_tokens(reply_tokens);
  generate->mutable_sampling()->set_temperature(0.0f);
  const v1::GenerateResponse response = Call(engine, request, uid).generate();
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(fresh);
  Call(engine, remove, uid);
  return response;
}

// One full chat; appends each turn's figures to turns[i].
void RunChat(Service& engine, Path path, int n_turns, int reply_tokens, const std::vector<std::string>& user,
             std::vector<TurnFigures>& turns) {
  v1::Request create;
  create.mutable_create_session()->set_system_prompt(std::string(common::kDefaultSystemPrompt));
  const std::string session = Call(engine, create).create_session().session_id();
  for (int t = 0; t < n_turns; ++t) {
    const std::string& text = user[t % user.size()];
    if (path == Path::kReprefill) {
      const v1::GenerateResponse reply = ReprefillTurn(engine, session, text, reply_tokens);
      turns[t].ttft_ms.push_back(reply.stats().time_to_first_token_ms());
      turns[t].prefilled.push_back(static_cast<double>(reply.stats().prefilled_tokens()));
      turns[t].reused.push_back(static_cast<double>(reply.stats().reused_tokens()));
      turns[t].length.push_back(static_cast<double>(reply.session_length()));
    }
    v1::Request request;
    v1::ChatRequest* chat = request.mutable_chat();
    chat->set_session_id(session);
    chat->set_user_text(text);
    chat->set_max_new_tokens(reply_tokens);
    chat->set_use_kv_cache(path != Path::kUncached);
    chat->mutable_sampling()->set_temperature(0.0f);
    const v1::ChatResponse reply = Call(engine, request).chat();
    if (path == Path::kReprefill) continue;  // this turn only advances the history
    turns[t].ttft_ms.push_back(reply.stats().time_to_first_token_ms());
    turns[t].prefilled.push_back(static_cast<double>(reply.stats().prefilled_tokens()));
    turns[t].reused.push_back(static_cast<double>(reply.stats().reused_tokens()));
    turns[t].length.push_back(static_cast<double>(reply.session_length()));
  }
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(session);
  Call(engine, remove);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) {
  using namespace niels::bench;
  CLI::App app{"nielsd-chat-bench: per-turn time to first token, cached vs uncached vs re-prefill, "
               "through the Engine"};
  std::string preset = "personal";
  std::string tokenizer_path = std::string(NIELS_SOURCE_DIR) + "/models/niels-demo/tokenizer.model";
  int threads = 0, repeats = 3, n_turns = 5, reply_tokens = 48;
  bool json = false;
  app.add_option("--preset", preset, "personal or base")->check(CLI::IsMember({"personal", "base"}))
      ->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path, "a tokenizer.model to encode the chat with")->capture_default_str();
  app.add_option("--threads", threads, "threads (0 = cores)")->capture_default_str();
  app.add_option("--repeats", repeats, "chats per path; medians are reported")->capture_default_str();
  app.add_option("--turns", n_turns, "turns per chat")->check(CLI::Range(1, 20))->capture_default_str();
  app.add_option("--reply-tokens", reply_tokens, "tokens per reply")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_flag("--json", json, "one JSON line per figure");
  CLI11_PARSE(app, argc, argv);

  ModelConfig config;
  config.name = preset + "-random";
  if (preset == "personal") {
    config.vocab_size = 16000, config.context = 512, config.width = 384, config.layers = 8, config.heads = 6, config.d_ff = 1152;
  } else {
    config.vocab_size = 16000, config.context = 1024, config.width = 512, config.layers = 8, config.heads = 8, config.d_ff = 1536;
  }
  niels::daemon::kernels::TuneHeapForActivations();
  auto pool = std::make_shared<niels::daemon::kernels::WorkerPool>(threads);
  auto tokenizer = niels::daemon::text::SentencePieceTokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "nielsd-chat-bench: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  auto model = std::make_unique<niels::daemon::loaders::Model>();
  model->config = config;
  model->transformer = std::make_unique<niels::daemon::model::Transformer>(
      config, niels::daemon::model::RandomWeights(config, /*seed=*/7), pool);
  model->tokenizer = std::move(tokenizer).value();
  EngineOptions options;  // threads already configured above
  Service engine(std::make_unique<Engine>(std::move(model), options));

  // User turns of a realistic length (a few dozen tokens each).
  const std::vector<std::string> user = {
      "hello! i just installed nielsd on my laptop. how do i start it, and where does it put its socket?",
      "thanks. what does the --no-kv-cache flag of niels-chat do, and why would anybody want to use it?",
      "can several people chat with the same daemon at the same time without seeing each other's sessions?",
      "how would i run nielsd as a systemd user service with socket activation, step by step please?",
      "last question: how can a python script talk to nielsd over the socket without niels-chat?",
  };
  std::vector<TurnFigures> cached(n_turns), uncached(n_turns), reprefill(n_turns);
  for (int r = 0; r < repeats; ++r) {  // interleaved, so machine noise hits all three alike
    RunChat(engine, Path::kCached, n_turns, reply_tokens, user, cached);
    RunChat(engine, Path::kUncached, n_turns, reply_tokens, user, uncached);
    RunChat(engine, Path::kReprefill, n_turns, reply_tokens, user, reprefill);
  }
  engine.Shutdown();

  if (!json) {
    std::printf("nielsd-chat-bench: preset %s (T %ld), %d turns x %d reply tokens, medians of %d chats, %s\n",
                preset.c_str(), static_cast<long>(config.context), n_turns, reply_tokens, repeats,
                niels::daemon::kernels::DescribeThreads(*pool).c_str());
    std::printf("%4s %8s | %12s %9s %7s | %12s %9s | %7s | %12s %9s\n", "turn", "length", "cached TTFT",
                "prefilled", "reused", "uncached TTFT", "prefilled", "ratio", "reprefill TTFT", "prefilled");
  }
  for (int t = 0; t < n_turns; ++t) {
    const double c_ttft = Median(cached[t].ttft_ms), u_ttft = Median(uncached[t].ttft_ms);
    const double r_ttft = Median(reprefill[t].ttft_ms);
    if (json) {
      auto line = [&](const char* metric, double value, const char* unit, const char* path) {
        std::printf("{\"metric\": \"%s\", \"value\": %.4f, \"unit\": \"%s\", \"preset\": \"%s\", \"turn\": %d, \"path\": \"%s\"}\n",
                    metric, value, unit, preset.c_str(), t + 1, path);
      };
      line("ttft_ms", c_ttft, "ms", "cached");
      line("ttft_ms", u_ttft, "ms", "uncached");
      line("prefilled_tokens", Median(cached[t].prefilled), "tokens", "cached");
      line("reused_tokens", Median(cached[t].reused), "tokens", "cached");
      line("prefilled_tokens", Median(uncached[t].prefilled), "tokens", "uncached");
      line("ttft_ms", r_ttft, "ms", "reprefill");
      line("prefilled_tokens", Median(reprefill[t].prefilled), "tokens", "reprefill");
    } else {
      std::printf("%4d %8.0f | %10.1fms %9.0f %7.0f | %11.1fms %9.0f | %6.1fx | %12.1fms %9.0f\n", t + 1,
                  Median(cached[t].length), c_ttft, Median(cached[t].prefilled), Median(cached[t].reused), u_ttft,
                  Median(uncached[t].prefilled), u_ttft / std::max(c_ttft, 1e-9), r_ttft,
                  Median(reprefill[t].prefilled));
    }
  }
  return 0;
}
