#include "tools/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include "daemon/model/transformer.h"
#include "tools/train/progress.h"

namespace niels::tools::train {
namespace {

using model::ModelConfig;
using torch_model::TorchWeights;

constexpr int64_t kIgnore = -100;   // cross-entropy target of untrained positions
constexpr size_t kBucketSpan = 512;  // examples sorted by length together before batching

// One step's input and targets: inputs [B, n-1] int64, targets [B, n-1] int64 (kIgnore where untrained).
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t tokens = 0;  // non-padding tokens
};

// One epoch's batches as lists of example indices: shuffle, sort spans of kBucketSpan by length,
// cut into batches of at most batch_tokens padded tokens, shuffle the batches.
std::vector<std::vector<size_t>> EpochBatches(const std::vector<Example>& examples, int64_t batch_tokens,
                                              std::mt19937_64& rng) {
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<size_t>> batches;
  for (size_t begin = 0; begin < order.size(); begin += kBucketSpan) {
    auto first = order.begin() + begin;
    auto last = order.begin() + std::min(order.size(), begin + kBucketSpan);
    std::stable_sort(first, last, [&](size_t a, size_t b) { return examples[a].tokens.size() < examples[b].tokens.size(); });
    std::vector<size_t> batch;
    for (auto it = first; it != last; ++it) {
      const int64_t longest = static_cast<int64_t>(examples[*it].tokens.size());  // sorted: the newest is longest
      if (!batch.empty() && static_cast<int64_t>(batch.size() + 1) * longest > batch_tokens) {
        batches.push_back(std::move(batch));
        batch.clear();
      }
      batch.push_back(*it);
    }
    if (!batch.empty()) batches.push_back(std::move(batch));
  }
  std::shuffle(batches.begin(), batches.end(), rng);
  return batches;
}

Batch MakeBatch(const std::vector<Example>& examples, const std::vector<size_t>& indices) {
  int64_t n = 0;
  for (size_t i : indices) n = std::max<int64_t>(n, static_cast<int64_t>(examples[i].tokens.size()));
  const int64_t b = static_cast<int64_t>(indices.size());
  Batch batch;
  batch.inputs = at::zeros({b, n - 1}, at::kLong);
  batch.targets = at::full({b, n - 1}, kIgnore, at::kLong);
  auto in = batch.inputs.accessor<int64_t, 2>();
  auto out = batch.targets.accessor<int64_t, 2>();
  for (int64_t row = 0; row < b; ++row) {
    const Example& e = examples[indices[row]];
    const int64_t len = static_cast<int64_t>(e.tokens.size());
    for (int64_t j = 0; j + 1 < len; ++j) {
      in[row][j] = e.tokens[j];
      if (e.trained[j + 1]) out[row][j] = e.tokens[j + 1];  // position j predicts token j+1
    }
    batch.tokens += len - 1;
  }
  return batch;
}

// Every tensor of `weights`, split into decayed (matrices, embeddings) and not decayed (norms, biases).
void CollectParameters(TorchWeights& weights, std::vector<torch::Tensor>& decay,
                       std::vector<torch::Tensor>& no_decay) {
  decay.push_back(weights.tok_emb);
  no_decay.push_back(weights.ln_f);
  for (torch_model::TorchBlockWeights& b : weights.blocks) {
    for (torch::Tensor* t : {&b.qkv, &b.proj, &b.fc_a_w, &b.fc_g_w, &b.fc_out_w}) decay.push_back(*t);
    for (torch::Tensor* t : {&b.ln1, &b.ln2, &b.fc_a_b, &b.fc_g_b, &b.fc_out_b}) no_decay.push_back(*t);
  }
}

// Scales all gradients so that their global L2 norm is at most max_norm.
void ClipGradients(const std::vector<torch::Tensor>& params, double max_norm) {
  double sum = 0;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) sum += p.grad().pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(sum);
  if (norm <= max_norm) return;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(max_norm / (norm + 1e-6));
  }
}

void SetLearningRate(torch::optim::AdamW& optimizer, double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

}  // namespace

double LearningRate(const TrainOptions& options, int64_t step) {
  if (step < options.warmup) return options.lr * (step + 1) / options.warmup;
  const double span = std::max<int64_t>(1, options.steps - options.warmup);
  const double progress = std::min(1.0, (step - options.warmup) / span);
  const double floor = options.lr * options.min_lr_ratio;
  return floor + (options.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

TrainResult TrainModel(const ModelConfig& config, TorchWeights& weights, const std::vector<Example>& examples,
                       const TrainOptions& options) {
  std::vector<torch::Tensor> decay, no_decay;
  CollectParameters(weights, decay, no_decay);
  std::vector<torch::Tensor> all = decay;
  all.insert(all.end(), no_decay.begin(), no_decay.end());
  for (torch::Tensor& p : all) p.requires_grad_(true);

  auto defaults = torch::optim::AdamWOptions(options.lr).betas({0.9, 0.95}).weight_decay(options.weight_decay);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(defaults));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(options.lr).betas({0.9, 0.95}).weight_decay(0.0)));
  torch::optim::AdamW optimizer(std::move(groups), defaults);

  std::mt19937_64 rng(options.seed);
  std::vector<std::vector<size_t>> epoch;
  size_t next = 0;
  Progress progress(options.steps, options.log_every);
  const int64_t tail = std::max<int64_t>(1, options.steps / 20);
  double tail_sum = 0;
  TrainResult result;
  for (int64_t step = 0; step < options.steps; ++step) {
    if (next == epoch.size()) {
      epoch = EpochBatches(examples, options.batch_tokens, rng);
      next = 0;
    }
    Batch batch = MakeBatch(examples, epoch[next++]);
    const double lr = LearningRate(options, step);
    SetLearningRate(optimizer, lr);

    torch::Tensor logits = torch_model::ForwardTrain(config, weights, batch.inputs);  // [B, n-1, V]
    torch::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, config.vocab_size}), batch.targets.reshape({-1}),
                                                /*weight=*/{}, at::Reduction::Mean, kIgnore);
    optimizer.zero_grad();
    loss.backward();
    if (options.grad_clip > 0) ClipGradients(all, options.grad_clip);
    optimizer.step();

    const double value = loss.item<double>();
    if (step >= options.steps - tail) tail_sum += value;
    result.tokens += batch.tokens;
    progress.Update(step + 1, value, lr, batch.tokens);
  }
  progress.Finish();
  for (torch::Tensor& p : all) {
    p.requires_grad_(false);
    p.mutable_grad() = torch::Tensor();
  }
  result.final_loss = tail_sum / static_cast<double>(std::min<int64_t>(tail, options.steps));
  result.seconds = progress.elapsed_seconds();
  return result;
}

}  // namespace niels::tools::train
