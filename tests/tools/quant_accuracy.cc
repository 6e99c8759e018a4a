// niels_quant_accuracy: how far quantized weights move a model's predictions, measured with nielsd's
// own loader and forward pass (LoadModel, model::Transformer), driven by
// quant_accuracy.py.
//
//   niels_quant_accuracy REFERENCE PROMPTS.json --tokens N --out RESULT.json [--threads K] [--dequantize] MODEL...
//
// PROMPTS: [[token ids], ...]. For each prompt the REFERENCE model (f32 weights) continues greedily
// (KV cache: Prefill, then one Decode per token) for min(N, T - prompt length) tokens; then the
// reference and every MODEL (the same model quantized) compute the teacher-forced logits of the whole
// sequence (one uncached Forward). At each continued position, with t the reference's greedy token:
//   - |delta logprob| = |log_softmax(model)[t] - log_softmax(reference)[t]|;
//   - the model's argmax agrees when it is t (ties: the lowest id, as greedy sampling picks);
//   - the first divergence is the first position where it does not: the number of tokens the model's
//     own greedy generation shares with the reference's (before it, both saw the same tokens).
// The reference's teacher-forced argmax equals its greedy tokens (nielsd's forward is bitwise the same
// however the tokens are split into steps); a difference is reported as reference_mismatches.
//
// RESULT: {"reference": {...}, "models": [{"path", "ok", "error", "max_abs_dlogprob", "mean_abs_dlogprob",
// "agree", "positions", "first_divergence": [per prompt], "continued": [per prompt]}]}. A model that
// cannot be loaded (e.g. a tensor type nielsd has no kernel for) gets ok = false and the loader's
// message. Exit status 0; 1 with the reason on stderr when the reference or the prompts are bad.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/model/kv_cache.h"
#include "tests/tools/gguf_test_model.h"

namespace {

namespace loaders = niels::daemon::loaders;
using niels::common::Status;
using niels::common::StatusOr;
using niels::daemon::model::KvCache;
using niels::daemon::model::ModelConfig;
using niels::daemon::model::Transformer;

// GGUF files run with at most this context (the reference's greedy continuation needs no more).
constexpr int64_t kMaxContext = 4096;

// A model to run: a GGUF file through the test harness (gguf_test_model.h: its weights straight from
// the mapping in the file's types, no tokenizer -- niels-export's files carry SentencePiece
// vocabularies, which LoadModel refuses), anything else through LoadModel.
class Runnable {
 public:
  static StatusOr<Runnable> Load(const std::string& path, std::shared_ptr<niels::daemon::kernels::WorkerPool> pool,
                                 bool dequantize = false) {
    Runnable r;
    if (path.size() > 5 && path.ends_with(".gguf")) {
      auto gguf = niels::testing::LoadGgufTestModel(path, kMaxContext, dequantize, std::move(pool));
      if (!gguf.ok()) return gguf.status();
      r.gguf_ = std::make_unique<niels::testing::GgufTestModel>(std::move(gguf).value());
    } else {
      auto model = loaders::LoadModel(path, std::move(pool));
      if (!model.ok()) return model.status();
      r.model_ = std::move(model).value();
    }
    return r;
  }
  const ModelConfig& config() const { return gguf_ ? gguf_->config : model_->config; }
  const Transformer& transformer() const { return gguf_ ? *gguf_->transformer : *model_->transformer; }

 private:
  std::unique_ptr<niels::testing::GgufTestModel> gguf_;
  std::unique_ptr<loaders::Model> model_;
};

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// log_softmax(row)[token], in double.
double LogProb(std::span<const float> row, int32_t token) {
  const double top = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - top);
  return static_cast<double>(row[static_cast<size_t>(token)]) - top - std::log(sum);
}

// A prompt continued by the reference: the whole sequence and where the continuation starts.
struct Continued {
  std::vector<int32_t> ids;
  size_t prompt = 0;
};

Continued Greedy(const Runnable& model, const std::vector<int32_t>& prompt, int64_t tokens) {
  const Transformer& transformer = model.transformer();
  const int64_t n_new = std::min<int64_t>(tokens, model.config().context - static_cast<int64_t>(prompt.size()));
  Continued out{prompt, prompt.size()};
  KvCache cache(model.config());
  std::vector<float> logits = transformer.Prefill(prompt, cache);
  KvCache* caches[] = {&cache};
  for (int64_t i = 0; i < n_new; ++i) {
    const int32_t next = Argmax(logits);
    out.ids.push_back(next);
    if (i + 1 < n_new) logits = transformer.Decode(std::span<const int32_t>(&out.ids.back(), 1), caches);
  }
  return out;
}

// Per continued position (sequence after sequence): log p(t) and the argmax of the model's rows.
struct Predictions {
  std::vector<double> logprob;
  std::vector<int32_t> argmax;
};

Predictions Predict(const Runnable& model, const std::vector<Continued>& sequences) {
  Predictions out;
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  for (const Continued& s : sequences) {
    const std::vector<float> rows = model.transformer().Forward(s.ids);
    for (size_t pos = s.prompt; pos < s.ids.size(); ++pos) {
      const std::span<const float> row(rows.data() + (pos - 1) * vocab, vocab);
      out.logprob.push_back(LogProb(row, s.ids[pos]));
      out.argmax.push_back(Argmax(row));
    }
  }
  return out;
}

nlohmann::json Compare(const std::vector<Continued>& sequences, const Predictions& reference,
                       const Predictions& model) {
  double max_abs = 0, sum_abs = 0;
  int64_t agree = 0;
  nlohmann::json first = nlohmann::json::array(), continued = nlohmann::json::array();
  size_t at = 0;
  for (const Continued& s : sequences) {
    int64_t diverged = -1;
    for (size_t pos = s.prompt; pos < s.ids.size(); ++pos, ++at) {
      const double d = std::abs(model.logprob[at] - reference.logprob[at]);
      max_abs = std::max(max_abs, d);
      sum_abs += d;
      const bool same = model.argmax[at] == s.ids[pos];
      agree += same;
      if (!same && diverged < 0) diverged = static_cast<int64_t>(pos - s.prompt);
    }
    const auto n = static_cast<int64_t>(s.ids.size() - s.prompt);
    first.push_back(diverged < 0 ? n : diverged);
    continued.push_back(n);
  }
  return {{"ok", true},
          {"max_abs_dlogprob", max_abs},
          {"mean_abs_dlogprob", at ? sum_abs / static_cast<double>(at) : 0.0},
          {"agree", agree},
          {"positions", at},
          {"first_divergence", first},
          {"continued", continued}};
}

StatusOr<std::vector<std::vector<int32_t>>> ReadPrompts(const std::string& path, const ModelConfig& c) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.empty()) return Status::InvalidArgument(path + ": not a non-empty JSON list of id lists");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : j) {
    if (!p.is_array() || p.empty() || static_cast<int64_t>(p.size()) >= c.context) {
      return Status::InvalidArgument(path + ": a prompt must be a list of 1.." + std::to_string(c.context - 1) +
                                     " ids");
    }
    std::vector<int32_t> ids;
    for (const auto& id : p) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c.vocab_size) {
        return Status::InvalidArgument(path + ": an id outside [0, V=" + std::to_string(c.vocab_size) + ")");
      }
      ids.push_back(id.get<int32_t>());
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

struct Options {
  std::string reference;
  std::string prompts;
  std::vector<std::string> models;
  int64_t tokens = 512;
  std::string out;
  int threads = 1;
  bool dequantize = false;
};

// The reference's part: its greedy continuations, its teacher-forced predictions along them, and
// what the result says about it.
struct Reference {
  ModelConfig config;
  std::vector<Continued> sequences;
  Predictions predictions;
  nlohmann::json summary;
};

StatusOr<Reference> RunReference(const Options& o, std::shared_ptr<niels::daemon::kernels::WorkerPool> pool) {
  StatusOr<Runnable> model = Runnable::Load(o.reference, std::move(pool));
  if (!model.ok()) return model.status();
  StatusOr<std::vector<std::vector<int32_t>>> prompts = ReadPrompts(o.prompts, model->config());
  if (!prompts.ok()) return prompts.status();
  Reference r;
  r.config = model->config();
  for (const auto& p : *prompts) r.sequences.push_back(Greedy(*model, p, o.tokens));
  r.predictions = Predict(*model, r.sequences);
  int64_t mismatches = 0;
  size_t at = 0;
  nlohmann::json sequences = nlohmann::json::array();
  for (const Continued& s : r.sequences) {
    for (size_t pos = s.prompt; pos < s.ids.size(); ++pos) mismatches += r.predictions.argmax[at++] != s.ids[pos];
    sequences.push_back(s.ids);
  }
  std::vector<double> p_top(r.predictions.logprob.size());
  std::transform(r.predictions.logprob.begin(), r.predictions.logprob.end(), p_top.begin(),
                 [](double lp) { return std::exp(lp); });
  std::sort(p_top.begin(), p_top.end());
  r.summary = {{"path", o.reference},
               {"positions", at},
               {"reference_mismatches", mismatches},
               {"top1_probability_median", p_top.empty() ? 0.0 : p_top[p_top.size() / 2]},
               {"sequences", sequences}};
  return r;
}

nlohmann::json CompareModel(const Options& o, const Reference& ref, const std::string& path,
                            std::shared_ptr<niels::daemon::kernels::WorkerPool> pool) {
  StatusOr<Runnable> model = Runnable::Load(path, std::move(pool), o.dequantize);
  nlohmann::json entry;
  if (!model.ok()) {
    entry = {{"ok", false}, {"error", model.status().ToString()}};
  } else if (model->config().vocab_size != ref.config.vocab_size || model->config().context < ref.config.context) {
    entry = {{"ok", false},
             {"error", "not the reference's shape: V " + std::to_string(model->config().vocab_size) + ", T " +
                           std::to_string(model->config().context)}};
  } else {
    entry = Compare(ref.sequences, ref.predictions, Predict(*model, ref.sequences));
  }
  entry["path"] = path;
  return entry;
}

Status Run(const Options& o) {
  auto pool = std::make_shared<niels::daemon::kernels::WorkerPool>(o.threads);
  StatusOr<Reference> ref = RunReference(o, pool);  // the reference model is freed before the others load
  if (!ref.ok()) return ref.status();
  nlohmann::json result = {{"reference", ref->summary}, {"models", nlohmann::json::array()}};
  for (const std::string& path : o.models) result["models"].push_back(CompareModel(o, *ref, path, pool));
  std::ofstream out(o.out, std::ios::binary | std::ios::trunc);
  out << result.dump();
  out.close();
  if (!out) return Status::NotFound("--out: cannot write " + o.out);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"niels_quant_accuracy: quantized models' logprobs and greedy tokens against the f32 reference's"};
  Options o;
  app.add_option("reference", o.reference, "the reference model (f32 weights): any path LoadModel takes")->required();
  app.add_option("prompts", o.prompts, "a JSON file: a list of prompts, each a list of token ids")->required();
  app.add_option("models", o.models, "the models to compare (the reference's weights quantized)");
  app.add_option("--tokens", o.tokens, "greedy tokens per prompt (fewer when the context ends first)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--out", o.out, "the result (JSON)")->required();
  app.add_option("--threads", o.threads, "compute threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--dequantize", o.dequantize,
               "GGUF MODELs: widen block-type matrices to f32 at load (the weights' rounding alone: float products, "
               "no 8-bit activations)");
  CLI11_PARSE(app, argc, argv);
  Status status;
  try {
    status = Run(o);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (!status.ok()) {
    std::cerr << "niels_quant_accuracy: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
