// niels-train: trains the tokenizer and a niels_gpt model on a chat corpus and writes a model
// directory (config.json, model.safetensors, tokenizer.model) that nielsd loads.
//
//   niels-train --corpus data/corpus --out models/niels-demo [--steps N --lr X ...]
//
// Steps: (1) SentencePiece on the corpus texts, (2) encode every conversation with the token-native
// template, (3) AdamW with the daemon's ForwardTrain, loss on assistant tokens only, (4) write the
// directory, reload it with the daemon's loader and print greedy replies to a few probe questions.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>

#include "common/defaults.h"
#include "daemon/text/chat_template.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/loaders/niels_dir.h"
#include "tools/torch/torch_weights.h"
#include "daemon/model/weights.h"
#include "tools/train/chat_corpus.h"
#include "tools/train/spm_trainer.h"
#include "tools/train/trainer.h"

namespace {

namespace fs = std::filesystem;
namespace model = niels::daemon::model;
namespace text = niels::daemon::text;
namespace loaders = niels::daemon::loaders;
namespace torch_model = niels::torch_model;
namespace train = niels::tools::train;

struct Flags {
  std::string corpus = "data/corpus";
  std::string out = "models/niels-demo";
  std::string name = "niels-demo";
  train::SpmOptions spm;
  model::ModelConfig shape = [] {
    model::ModelConfig c;  // niels_gpt's flags; V comes from the trained tokenizer
    c.context = 256;
    c.width = 256;
    c.layers = 4;
    c.heads = 4;
    c.d_ff = 768;
    c.rope_theta = 10000.0;
    return c;
  }();
  train::TrainOptions train;
  uint64_t seed = 1234;
  int threads = 2;
  std::string dtype = "f32";  // of the written model.safetensors
  std::vector<std::string> probes = {"how do i start nielsd?", "what does --no-kv-cache do?",
                                     "where is the socket?", "how old is niels?"};
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "niels-train: %s\n", message.c_str());
  return 1;
}

// Writes a temporary file beside `path` and renames it over `path`: a running nielsd that has the
// old model open keeps reading it whole.
bool WriteFile(const fs::path& path, const std::string& bytes) {
  fs::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  return !ec;
}

// Greedy reply of the written model to one user message after the default system prompt.
std::string GreedyReply(const loaders::Model& m, const std::string& question) {
  auto system = text::EncodeMessage(*m.tokenizer, m.special, text::Role::kSystem,
                                    std::string(niels::common::kDefaultSystemPrompt));
  auto user = text::EncodeMessage(*m.tokenizer, m.special, text::Role::kUser, question);
  if (!system.ok() || !user.ok()) return "(" + (system.ok() ? user : system).status().ToString() + ")";
  std::vector<int32_t> ids = std::move(*system);
  ids.insert(ids.end(), user->begin(), user->end());
  ids.push_back(text::GenerationPrompt(m.special).front());
  std::vector<int32_t> reply;
  const std::vector<int32_t> banned = text::DefaultBannedIds(m.special);
  while (static_cast<int64_t>(ids.size()) < m.config.context && reply.size() < 64) {
    std::vector<float> logits = m.transformer->Forward(ids, /*last_only=*/true);  // [V]
    for (int32_t b : banned) logits[b] = -INFINITY;
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == m.special.eot) break;
    reply.push_back(next);
    ids.push_back(next);
  }
  return m.tokenizer->Decode(reply);
}

int Run(const Flags& flags) {
  at::set_num_threads(flags.threads);
  auto corpus = train::LoadCorpus(flags.corpus);
  if (!corpus.ok()) return Fail(corpus.status().ToString());
  std::fprintf(stderr, "corpus: %zu conversations from %s\n", corpus->size(), flags.corpus.c_str());

  // (1) tokenizer
  auto spm = train::TrainSentencePiece(train::CorpusSentences(*corpus), flags.spm);
  if (!spm.ok()) return Fail(spm.status().ToString());
  const fs::path out(flags.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (!WriteFile(out / "tokenizer.model", *spm)) return Fail("cannot write " + (out / "tokenizer.model").string());
  auto tokenizer = text::SentencePieceTokenizer::Load(out / "tokenizer.model");
  if (!tokenizer.ok()) return Fail(tokenizer.status().ToString());

  // (2) examples
  model::ModelConfig config = flags.shape;
  config.vocab_size = (*tokenizer)->vocab_size();
  config.name = flags.name;
  std::vector<train::Example> examples;
  int64_t tokens = 0, trained = 0;
  for (const train::Conversation& c : *corpus) {
    train::Example e = train::EncodeConversation(**tokenizer, c, config.context);
    if (e.tokens.size() < 2) continue;
    tokens += static_cast<int64_t>(e.tokens.size());
    for (uint8_t t : e.trained) trained += t;
    examples.push_back(std::move(e));
  }
  if (examples.empty()) return Fail("no conversation fits the context");
  std::fprintf(stderr, "tokenizer: %d pieces; %zu examples, %lld tokens (%lld trained), %.1f tokens/example\n",
               (*tokenizer)->vocab_size(), examples.size(), static_cast<long long>(tokens),
               static_cast<long long>(trained), static_cast<double>(tokens) / examples.size());

  // (3) model
  at::manual_seed(flags.seed);
  torch_model::TorchWeights weights = torch_model::RandomTorchWeights(config, flags.seed);
  int64_t parameters = 0;
  for (torch::Tensor* t : weights.All()) parameters += t->numel();
  std::fprintf(stderr, "model: V=%lld T=%lld C=%lld L=%lld H=%lld d_ff=%lld, %lld parameters (%.2f MB f32)\n",
               static_cast<long long>(config.vocab_size), static_cast<long long>(config.context),
               static_cast<long long>(config.width), static_cast<long long>(config.layers),
               static_cast<long long>(config.heads), static_cast<long long>(config.d_ff),
               static_cast<long long>(parameters), parameters * 4 / 1e6);
  train::TrainOptions options = flags.train;
  options.seed = flags.seed;
  train::TrainResult result = train::TrainModel(config, weights, examples, options);
  std::fprintf(stderr, "result: final loss %.4f, %.1f s, %lld tokens\n", result.final_loss, result.seconds,
               static_cast<long long>(result.tokens));

  // (4) write, reload with the daemon's loader, probe
  if (auto s = loaders::SaveNielsWeights(torch_model::FromTorch(weights), out / "model.safetensors",
                                  niels::daemon::kernels::ParseDtype(flags.dtype)); !s.ok()) {
    return Fail(s.ToString());
  }
  if (!WriteFile(out / "config.json", model::ModelConfigToJson(config) + "\n")) return Fail("cannot write config.json");
  auto loaded = loaders::LoadModel(out);
  if (!loaded.ok()) return Fail("the written model does not load: " + loaded.status().ToString());
  for (const std::string& q : flags.probes) std::printf("> %s\n%s\n", q.c_str(), GreedyReply(**loaded, q).c_str());
  std::fprintf(stderr, "wrote %s\n", out.string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"niels-train: train the tokenizer and a niels_gpt model on a chat corpus; write a model directory"};
  app.add_option("--corpus", f.corpus, "corpus .jsonl file or directory of them")->capture_default_str();
  app.add_option("--out", f.out, "output model directory")->capture_default_str();
  app.add_option("--name", f.name, "model name in config.json")->capture_default_str();
  app.add_option("--vocab", f.spm.vocab_size, "SentencePiece vocabulary size")->capture_default_str();
  app.add_option("--spm-type", f.spm.model_type, "SentencePiece model type (bpe, unigram)")->capture_default_str();
  app.add_option("--context", f.shape.context, "T: context length")->capture_default_str();
  app.add_option("--width", f.shape.width, "C: model width")->capture_default_str();
  app.add_option("--layers", f.shape.layers, "L: transformer blocks")->capture_default_str();
  app.add_option("--heads", f.shape.heads, "H: attention heads")->capture_default_str();
  app.add_option("--d-ff", f.shape.d_ff, "SwiGLU hidden width")->capture_default_str();
  app.add_option("--rope-theta", f.shape.rope_theta, "RoPE base")->capture_default_str();
  app.add_option("--steps", f.train.steps, "optimizer steps")->capture_default_str();
  app.add_option("--lr", f.train.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr-ratio", f.train.min_lr_ratio, "final lr / peak lr (cosine)")->capture_default_str();
  app.add_option("--warmup", f.train.warmup, "linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", f.train.weight_decay, "AdamW weight decay (matrices)")->capture_default_str();
  app.add_option("--grad-clip", f.train.grad_clip, "max gradient norm (0 = off)")->capture_default_str();
  app.add_option("--batch-tokens", f.train.batch_tokens, "padded tokens per batch")->capture_default_str();
  app.add_option("--seed", f.seed, "seed for weights and data order")->capture_default_str();
  app.add_option("--dtype", f.dtype, "dtype of the written weights: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "libtorch intra-op threads")->capture_default_str();
  app.add_option("--log-every", f.train.log_every, "steps between progress lines when not a terminal")
      ->capture_default_str();
  app.add_option("--probe", f.probes, "questions answered greedily by the written model at the end");
  CLI11_PARSE(app, argc, argv);
  try {
    return Run(f);
  } catch (const c10::Error& e) {
    return Fail(std::string("libtorch: ") + e.what_without_backtrace());
  }
}
