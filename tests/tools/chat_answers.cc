// niels_chat_answers: greedy one-turn chat replies as nielsd's Chat path makes them (the model's
// ChatFormat, its banned role markers and stop ids, argmax sampling), optionally with another weight
// file of the same model -- the shipped model's answers with quantized weights, which nielsd cannot
// serve itself (niels-export's GGUF carries a SentencePiece vocabulary; LoadModel refuses it).
// Driven by shipped_answers_test.py.
//
//   niels_chat_answers MODEL QUESTIONS.json --system TEXT --out OUT.json [--weights FILE.gguf]
//       [--max-new-tokens N]
//
// MODEL: what LoadModel loads (its tokenizer, chat format and, without --weights, its weights).
// --weights: a GGUF of the same model (gguf_test_model.h), quantized or not, whose weights replace
// MODEL's. QUESTIONS: a JSON list of user texts, each asked in a fresh session with the system
// prompt. OUT: {"replies": [text, ...], "stop": [true when a stop id ended the reply, ...]}.
// A reply is the argmax token of every step (role markers banned, as nielsd bans them unless a
// request allows special tokens) until a stop id, max_new_tokens (default 256, nielsd's) or the end
// of the context; its text is the tokenizer's Decode of the ids before the stop id. One thread.
// Exit status 0; 1 with the reason on stderr.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/model/kv_cache.h"
#include "daemon/text/chat_format.h"
#include "tests/tools/gguf_test_model.h"

namespace {

namespace loaders = niels::daemon::loaders;
namespace text = niels::daemon::text;
using niels::common::Status;
using niels::common::StatusOr;
using niels::daemon::model::KvCache;
using niels::daemon::model::Transformer;

struct Options {
  std::string model;
  std::string questions;
  std::string system;
  std::string out;
  std::optional<std::string> weights;
  int max_new_tokens = 256;
};

// The argmax over the ids that are not banned (the lowest id on ties, as nielsd's greedy sampler).
int32_t Greedy(std::span<const float> row, const std::vector<int32_t>& banned) {
  int32_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < row.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (row[i] > best_value && std::find(banned.begin(), banned.end(), id) == banned.end()) {
      best = id;
      best_value = row[i];
    }
  }
  return best;
}

struct Reply {
  std::string text;
  bool stopped = false;
};

StatusOr<Reply> Answer(const loaders::Model& model, const Transformer& transformer, const text::ChatFormat& format,
                       const Options& o, const std::string& question) {
  StatusOr<std::vector<int32_t>> start = format.SessionStart(o.system);
  if (!start.ok()) return start.status();
  StatusOr<text::ChatPrompt> turn = format.EncodeTurn(o.system, {}, question, {});
  if (!turn.ok()) return turn.status();
  std::vector<int32_t> prompt = *start;
  if (format.kind() == text::ChatFormat::Kind::kTokenNative) {
    prompt.insert(prompt.end(), turn->ids.begin(), turn->ids.end());
  } else {
    prompt = turn->ids;  // a template renders the whole conversation
  }
  const int64_t room = model.config.context - static_cast<int64_t>(prompt.size());
  if (room < 1) return Status::InvalidArgument("the prompt fills the context");
  KvCache cache(model.config);
  std::vector<float> logits = transformer.Prefill(prompt, cache);
  KvCache* caches[] = {&cache};
  const std::vector<int32_t>& stops = format.stop_ids();
  std::vector<int32_t> ids;
  Reply reply;
  for (int64_t i = 0; i < std::min<int64_t>(o.max_new_tokens, room); ++i) {
    const int32_t next = Greedy(logits, format.banned_ids());
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      reply.stopped = true;
      break;
    }
    ids.push_back(next);
    logits = transformer.Decode(std::span<const int32_t>(&ids.back(), 1), caches);
  }
  reply.text = model.tokenizer->Decode(ids);
  return reply;
}

Status Run(const Options& o) {
  StatusOr<std::unique_ptr<loaders::Model>> loaded = loaders::LoadModel(o.model);
  if (!loaded.ok()) return loaded.status();
  const loaders::Model& model = **loaded;
  text::ChatFormatSource source{model.tokenizer.get(), model.special,   model.stop_ids,  model.chat_template,
                                model.bos_token,       model.eos_token, model.add_bos_id};
  StatusOr<std::unique_ptr<text::ChatFormat>> format = text::MakeChatFormat(source);
  if (!format.ok()) return format.status();
  std::optional<niels::testing::GgufTestModel> weights;
  if (o.weights) {
    auto gguf = niels::testing::LoadGgufTestModel(*o.weights, model.config.context);
    if (!gguf.ok()) return gguf.status();
    if (gguf->config.vocab_size != model.config.vocab_size || gguf->config.context != model.config.context) {
      return Status::InvalidArgument(*o.weights + ": not the shape of " + o.model);
    }
    weights = std::move(gguf).value();
  }
  const Transformer& transformer = weights ? *weights->transformer : *model.transformer;
  std::ifstream in(o.questions, std::ios::binary);
  const nlohmann::json questions = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!questions.is_array()) return Status::InvalidArgument(o.questions + ": not a JSON list of texts");
  nlohmann::json replies = nlohmann::json::array(), stops = nlohmann::json::array();
  for (const auto& q : questions) {
    if (!q.is_string()) return Status::InvalidArgument(o.questions + ": holds a non-string");
    StatusOr<Reply> reply = Answer(model, transformer, **format, o, q.get<std::string>());
    if (!reply.ok()) return reply.status();
    replies.push_back(reply->text);
    stops.push_back(reply->stopped);
  }
  std::ofstream out(o.out, std::ios::binary | std::ios::trunc);
  out << nlohmann::json{{"replies", replies}, {"stop", stops}}.dump();
  out.close();
  if (!out) return Status::NotFound("--out: cannot write " + o.out);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"niels_chat_answers: greedy chat replies as nielsd's Chat path makes them, with another weight file"};
  Options o;
  app.add_option("model", o.model, "the model (tokenizer, chat format, weights): any path LoadModel takes")->required();
  app.add_option("questions", o.questions, "a JSON file: a list of user texts")->required();
  app.add_option("--system", o.system, "the system prompt")->required();
  app.add_option("--out", o.out, "the replies (JSON)")->required();
  app.add_option("--weights", o.weights, "a GGUF of the same model whose weights to run instead");
  app.add_option("--max-new-tokens", o.max_new_tokens, "longest reply")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  Status status;
  try {
    status = Run(o);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (!status.ok()) {
    std::cerr << "niels_chat_answers: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
