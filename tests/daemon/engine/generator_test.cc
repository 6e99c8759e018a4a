#include "daemon/engine/generator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/text/chat_template.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "tests/support/test_model.h"

namespace niels::daemon::engine {
namespace {

using model::KvCache;
using model::ModelConfig;

constexpr float kPeak = 20.0f;

// A LanguageModel with forced outputs: the logits at position p are kPeak at next[p] (0 elsewhere),
// so greedy and sampled decoding both follow the script. It appends the positions it processes to
// the caches it is given (zeros) and logs every (position, token) fed through the cached entry points.
class ScriptedModel final : public model::LanguageModel {
 public:
  ScriptedModel(ModelConfig config, std::vector<int32_t> next) : config_(config), next_(std::move(next)) {}

  const ModelConfig& config() const override { return config_; }

  std::vector<float> Prefill(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const override {
    ++prefill_calls;
    const int64_t start = cache.length();
    const int64_t n = static_cast<int64_t>(tokens.size());
    largest_call = std::max(largest_call, n);
    EXPECT_LE(start + n, config_.context);
    Append(cache, tokens);
    return all_logits ? LogitsAt(start, n) : LogitsAt(start + n - 1, 1);
  }

  std::vector<float> Decode(std::span<const int32_t> tokens, std::span<KvCache* const> caches,
                            model::AttentionTrace* trace) const override {
    ++decode_calls;
    std::vector<float> rows;
    if (trace != nullptr) trace->rows.clear();
    for (size_t b = 0; b < tokens.size(); ++b) {
      const int64_t pos = caches[b]->length();
      EXPECT_LT(pos, config_.context);
      Append(*caches[b], tokens.subspan(b, 1));
      const std::vector<float> row = LogitsAt(pos, 1);
      rows.insert(rows.end(), row.begin(), row.end());
      // A recognisable attention row: [H, length] filled with the query position.
      if (trace != nullptr) trace->rows.emplace_back(config_.heads * (pos + 1), float(pos));
    }
    return rows;
  }

  std::vector<float> Forward(std::span<const int32_t> tokens, bool last_only) const override {
    ++forward_calls;
    const int64_t n = static_cast<int64_t>(tokens.size());
    largest_call = std::max(largest_call, n);
    EXPECT_LE(n, config_.context);
    return last_only ? LogitsAt(n - 1, 1) : LogitsAt(0, n);
  }

  mutable std::vector<std::pair<int64_t, int32_t>> fed;  // (position, token) via Prefill/Decode
  mutable int prefill_calls = 0;
  mutable int decode_calls = 0;
  mutable int forward_calls = 0;
  mutable int64_t largest_call = 0;  // positions of the largest Prefill or Forward

 private:
  // Appends the positions (their storage left as it is: nothing reads it).
  void Append(KvCache& cache, std::span<const int32_t> tokens) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t i = 0; i < n; ++i) fed.push_back({cache.length() + i, tokens[i]});
    if (!cache.PrepareWrite(n)) throw model::KvExhausted("scripted model: no KV block");
    cache.Commit(tokens);  // the keys and values themselves are never read
  }

  // [n, V] logits of positions start..start+n-1, row-major.
  std::vector<float> LogitsAt(int64_t start, int64_t n) const {
    std::vector<float> logits(static_cast<size_t>(n * config_.vocab_size), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = start + i;
      const int32_t id = p < static_cast<int64_t>(next_.size()) ? next_[p] : 1;
      logits[i * config_.vocab_size + id] = kPeak;
    }
    return logits;
  }

  ModelConfig config_;
  std::vector<int32_t> next_;
};

ModelConfig ScriptConfig(int64_t vocab, int64_t context) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.context = context;
  c.width = 8;
  c.layers = 1;
  c.heads = 2;
  c.d_ff = 8;
  return c;
}

// next[p] = full[p + 1]: the scripted model continues `full` from any prefix of it.
std::vector<int32_t> ScriptOf(const std::vector<int32_t>& full) {
  return std::vector<int32_t>(full.begin() + 1, full.end());
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

GenerateOptions Greedy(int32_t max_new_tokens, bool cached = true) {
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_new_tokens = max_new_tokens;
  o.use_kv_cache = cached;
  return o;
}

// Every position 0..n-1 fed exactly once, with the sequence's token at that position.
void ExpectEachPositionFedOnce(const ScriptedModel& m, const std::vector<int32_t>& tokens, int64_t n) {
  std::map<int64_t, int> count;
  for (const auto& [pos, token] : m.fed) {
    ++count[pos];
    ASSERT_LT(pos, static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(token, tokens[pos]) << "position " << pos;
  }
  ASSERT_EQ(static_cast<int64_t>(count.size()), n);
  for (const auto& [pos, c] : count) EXPECT_EQ(c, 1) << "position " << pos << " fed " << c << " times";
}

// ---------------------------------------------------------------- scripted: stop rules

class TokenizerFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new niels::testing::TempDir("generator_test_");
    niels::testing::TrainTinyTokenizer(*dir_ / "tokenizer.model");
    auto loaded = text::SentencePieceTokenizer::Load(*dir_ / "tokenizer.model");
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    tokenizer_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  static niels::testing::TempDir* dir_;
  static text::SentencePieceTokenizer* tokenizer_;
};
niels::testing::TempDir* TokenizerFixture::dir_ = nullptr;
text::SentencePieceTokenizer* TokenizerFixture::tokenizer_ = nullptr;

using GeneratorStopTest = TokenizerFixture;

// The byte-fallback id of one byte ("<0x0A>" for '\n').
int32_t ByteId(const text::Tokenizer& tok, unsigned char byte) {
  char piece[8];
  std::snprintf(piece, sizeof piece, "<0x%02X>", byte);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.Piece(id) == piece) return id;
  }
  return -1;
}

TEST_F(GeneratorStopTest, DoesNotStopOnUserTextStopsOnEot) {
  const text::SentencePieceTokenizer& tok = *tokenizer_;
  const int32_t eot = tok.special().eot;
  // The reply spells the bytes of "\nuser: " (byte-fallback ids) in the middle, then ends with eot;
  // more text follows eot in the script.
  std::vector<int32_t> user_bytes;
  for (char c : std::string("\nuser: ")) {
    user_bytes.push_back(ByteId(tok, static_cast<unsigned char>(c)));
    ASSERT_GE(user_bytes.back(), 0) << "no byte piece for " << int(c);
  }
  const std::vector<int32_t> reply =
      Concat(Concat(niels::testing::EncodeText(tok, "Sure."), user_bytes), niels::testing::EncodeText(tok, "more text"));
  ASSERT_NE(tok.Decode(reply).find("\nuser: "), std::string::npos) << tok.Decode(reply);
  const std::vector<int32_t> prompt =
      Concat(text::EncodeMessage(tok, tok.special(), text::Role::kUser, "hi").value(), text::GenerationPrompt(tok.special()));
  const std::vector<int32_t> full = Concat(Concat(Concat(prompt, reply), {eot}), niels::testing::EncodeText(tok, "never seen"));

  for (bool cached : {true, false}) {
    ScriptedModel m(ScriptConfig(tok.vocab_size(), 256), ScriptOf(full));
    Sequence seq(m.config());
    GenerateOptions o = Greedy(200, cached);
    o.stop_ids = {eot};
    o.sampling.banned_ids = text::DefaultBannedIds(tok.special());
    const GenerateResult r = Generate(m, seq, prompt, o);
    EXPECT_EQ(r.stop_reason, StopReason::kStopToken) << cached;
    EXPECT_EQ(r.new_tokens, Concat(reply, {eot})) << cached;
    EXPECT_EQ(seq.tokens, Concat(Concat(prompt, reply), {eot}));
    EXPECT_NE(tok.Decode(r.new_tokens).find("\nuser: "), std::string::npos);
  }
}

TEST(GeneratorScriptedTest, SampledPathFollowsScriptToo) {
  const std::vector<int32_t> full = {5, 6, 7, 8, 9, 10, 11, 3, 12};
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence seq(m.config());
  GenerateOptions o;  // default sampling: temperature 0.9, top_k 50, seed 42
  o.stop_ids = {3};
  const GenerateResult r = Generate(m, seq, std::vector<int32_t>{5, 6}, o);
  EXPECT_EQ(r.new_tokens, (std::vector<int32_t>{7, 8, 9, 10, 11, 3}));
  EXPECT_EQ(r.stop_reason, StopReason::kStopToken);
}

TEST(GeneratorScriptedTest, CachedPathFeedsEveryTokenOnce) {
  std::vector<int32_t> full;
  for (int i = 0; i < 40; ++i) full.push_back(4 + i % 20);
  full[30] = 2;  // the stop id
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence seq(m.config());
  GenerateOptions o = Greedy(100);
  o.stop_ids = {2};
  const std::vector<int32_t> prompt(full.begin(), full.begin() + 10);
  const GenerateResult r = Generate(m, seq, prompt, o);
  EXPECT_EQ(r.stop_reason, StopReason::kStopToken);
  EXPECT_EQ(seq.tokens, std::vector<int32_t>(full.begin(), full.begin() + 31));
  EXPECT_EQ(r.new_tokens.size(), 21u);
  // One prefill of the prompt, one decode per later id; the stop id itself is not fed.
  EXPECT_EQ(m.prefill_calls, 1);
  EXPECT_EQ(m.decode_calls, 20);
  EXPECT_EQ(m.forward_calls, 0);
  EXPECT_EQ(seq.cache.length(), static_cast<int64_t>(seq.tokens.size()) - 1);
  ExpectEachPositionFedOnce(m, seq.tokens, 30);
  EXPECT_EQ(r.prompt_tokens, 10);
  EXPECT_EQ(r.reused_tokens, 0);
  EXPECT_EQ(r.prefilled_tokens, 10);
}

TEST(GeneratorScriptedTest, SecondCallStatsAndNoRefeed) {
  std::vector<int32_t> full;
  for (int i = 0; i < 60; ++i) full.push_back(4 + (i * 7) % 25);
  ScriptedModel m(ScriptConfig(32, 128), ScriptOf(full));
  Sequence seq(m.config());
  const GenerateResult r1 = Generate(m, seq, std::span(full).first(12), Greedy(8));
  EXPECT_EQ(r1.stop_reason, StopReason::kMaxTokens);
  ASSERT_EQ(seq.tokens.size(), 20u);
  EXPECT_EQ(seq.cache.length(), 19);

  // The next turn's input continues the script; the last sampled id (position 19) is fed first.
  const GenerateResult r2 = Generate(m, seq, std::span(full).subspan(20, 5), Greedy(6));
  EXPECT_EQ(r2.prompt_tokens, 25);
  EXPECT_EQ(r2.reused_tokens, 19);
  EXPECT_EQ(r2.prefilled_tokens, 6);
  EXPECT_EQ(r2.new_tokens, std::vector<int32_t>(full.begin() + 25, full.begin() + 31));
  EXPECT_EQ(m.prefill_calls, 2);
  ExpectEachPositionFedOnce(m, seq.tokens, 30);
  EXPECT_EQ(r2.time_to_first_token_s >= 0.0, true);
  EXPECT_GT(r2.decode_tokens_per_s, 0.0);
}

TEST(GeneratorScriptedTest, ContextFullAtT) {
  const int64_t t = 16;
  std::vector<int32_t> full;
  for (int i = 0; i < 40; ++i) full.push_back(4 + i % 9);
  for (bool cached : {true, false}) {
    ScriptedModel m(ScriptConfig(32, t), ScriptOf(full));
    Sequence seq(m.config());
    const GenerateResult r = Generate(m, seq, std::span(full).first(5), Greedy(100, cached));
    EXPECT_EQ(r.stop_reason, StopReason::kContextFull) << cached;
    EXPECT_EQ(static_cast<int64_t>(seq.tokens.size()), t);
    EXPECT_EQ(r.new_tokens, std::vector<int32_t>(full.begin() + 5, full.begin() + t));
    // At T nothing more is sampled: a further call ends at once with kContextFull.
    const int forwards = m.prefill_calls + m.decode_calls + m.forward_calls;
    const GenerateResult again = Generate(m, seq, {}, Greedy(10, cached));
    EXPECT_EQ(again.stop_reason, StopReason::kContextFull);
    EXPECT_TRUE(again.new_tokens.empty());
    EXPECT_EQ(static_cast<int64_t>(seq.tokens.size()), t);
    if (!cached) {
      EXPECT_EQ(m.prefill_calls + m.decode_calls + m.forward_calls, forwards);
    }
  }
}

TEST(GeneratorScriptedTest, MaxNewTokensZeroOnlyPrefills) {
  const std::vector<int32_t> full = {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence seq(m.config());
  int events = 0;
  GenerateOptions o = Greedy(0);
  o.on_token = [&](const StepEvent&) { ++events; };
  const GenerateResult r = Generate(m, seq, std::span(full).first(6), o);
  EXPECT_EQ(r.stop_reason, StopReason::kMaxTokens);
  EXPECT_TRUE(r.new_tokens.empty());
  EXPECT_EQ(events, 0);
  EXPECT_EQ(seq.tokens, std::vector<int32_t>(full.begin(), full.begin() + 6));
  EXPECT_EQ(seq.cache.length(), 6);
  EXPECT_EQ(m.prefill_calls, 1);
  EXPECT_EQ(m.decode_calls, 0);
  EXPECT_EQ(r.prefilled_tokens, 6);

  // Empty input continues from the cache state.
  const GenerateResult r2 = Generate(m, seq, {}, Greedy(3));
  EXPECT_EQ(r2.new_tokens, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(r2.prompt_tokens, 6);
  EXPECT_EQ(r2.reused_tokens, 5);    // the last position is recomputed for its logits
  EXPECT_EQ(r2.prefilled_tokens, 1);
  EXPECT_EQ(seq.cache.length(), 8);
}

TEST(GeneratorScriptedTest, UncachedPathDropsCacheAndUsesFullForward) {
  std::vector<int32_t> full;
  for (int i = 0; i < 30; ++i) full.push_back(4 + i % 11);
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence seq(m.config());
  Generate(m, seq, std::span(full).first(8), Greedy(2));  // cached: fills the cache
  ASSERT_EQ(seq.cache.length(), 9);
  const GenerateResult r = Generate(m, seq, {}, Greedy(5, /*cached=*/false));
  EXPECT_EQ(r.new_tokens, std::vector<int32_t>(full.begin() + 10, full.begin() + 15));
  EXPECT_EQ(m.forward_calls, 5);
  EXPECT_EQ(seq.cache.length(), 0);
  EXPECT_EQ(r.reused_tokens, 0);
  // The next cached call re-prefills the whole sequence.
  const GenerateResult r2 = Generate(m, seq, {}, Greedy(1));
  EXPECT_EQ(r2.reused_tokens, 0);
  EXPECT_EQ(r2.prefilled_tokens, 15);
  EXPECT_EQ(r2.new_tokens, (std::vector<int32_t>{full[15]}));
}

// Chunked uncached path: every id's forward over the whole sequence is computed in prefill chunks,
// so no model call takes more than the chunk (it took the whole sequence, Forward, before).
TEST(GeneratorScriptedTest, ChunkedUncachedPathForwardsInChunks) {
  std::vector<int32_t> full;
  for (int i = 0; i < 30; ++i) full.push_back(4 + i % 11);
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence seq(m.config());
  GenerationTask task(m, seq, Greedy(5, /*cached=*/false));
  task.Start(std::span(full).first(10), /*prefill_chunk=*/4);
  int steps = 0;
  while (!task.done()) {
    task.Step();
    ++steps;
  }
  const GenerateResult r = task.TakeResult();
  EXPECT_EQ(r.new_tokens, std::vector<int32_t>(full.begin() + 10, full.begin() + 15));
  EXPECT_FALSE(r.used_kv_cache);
  EXPECT_LE(m.largest_call, 4);
  EXPECT_EQ(m.forward_calls, 0);
  EXPECT_EQ(steps, 3 + 3 + 3 + 4 + 4);  // ceil(10/4), ceil(11/4), ceil(12/4), ceil(13/4), ceil(14/4)
  EXPECT_EQ(seq.cache.length(), 0);
}

TEST(GeneratorScriptedTest, CancelStopsBeforeTheNextForward) {
  std::vector<int32_t> full;
  for (int i = 0; i < 40; ++i) full.push_back(4 + i % 13);
  for (bool cached : {true, false}) {
    ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
    Sequence seq(m.config());
    std::atomic<bool> cancel{false};
    GenerateOptions o = Greedy(30, cached);
    o.cancel = &cancel;
    o.on_token = [&](const StepEvent& e) {
      if (e.index == 2) cancel = true;
    };
    const GenerateResult r = Generate(m, seq, std::span(full).first(5), o);
    EXPECT_EQ(r.stop_reason, StopReason::kCancelled);
    EXPECT_EQ(r.new_tokens.size(), 3u);
    EXPECT_EQ(seq.tokens.size(), 8u);
    if (cached) {
      EXPECT_EQ(m.prefill_calls, 1);
      EXPECT_EQ(m.decode_calls, 2);
    } else {
      EXPECT_EQ(m.forward_calls, 3);
    }

    // Cancelled before the start: no forward at all.
    ScriptedModel m2(ScriptConfig(32, 64), ScriptOf(full));
    Sequence seq2(m2.config());
    const GenerateResult r2 = Generate(m2, seq2, std::span(full).first(5), o);
    EXPECT_EQ(r2.stop_reason, StopReason::kCancelled);
    EXPECT_TRUE(r2.new_tokens.empty());
    EXPECT_EQ(m2.prefill_calls + m2.decode_calls + m2.forward_calls, 0);
  }
}

// With a logit bias the step's logprob and alternatives are log_softmax of the biased row, computed
// here by hand in double from the scripted logits; greedy takes the biased argmax.
TEST(GeneratorScriptedTest, LogprobsAreOfTheBiasedLogits) {
  const std::vector<int32_t> full = {4, 5, 6, 7, 8, 9, 10};
  const int64_t vocab = 32;
  const std::vector<sampling::TokenBias> bias = {
      {0, 1.5f}, {3, -INFINITY}, {8, -30.0f}, {20, kPeak + 2.0f}};
  for (bool cached : {true, false}) {
    ScriptedModel m(ScriptConfig(vocab, 64), ScriptOf(full));
    Sequence seq(m.config());
    std::vector<StepEvent> events;
    GenerateOptions o = Greedy(4, cached);
    o.want_logprobs = true;
    o.top_logprobs = 3;
    o.sampling.logit_bias = bias;
    o.on_token = [&](const StepEvent& e) { events.push_back(e); };
    const GenerateResult r = Generate(m, seq, std::span(full).first(3), o);
    ASSERT_EQ(events.size(), 4u);
    EXPECT_EQ(r.new_tokens, std::vector<int32_t>(4, 20));
    for (size_t i = 0; i < events.size(); ++i) {
      // The scripted row of position 2 + i (kPeak at full[3 + i]), biased by hand.
      std::vector<double> row(vocab, 0.0);
      row[full[3 + i]] = kPeak;
      for (const sampling::TokenBias& b : bias) row[b.id] = std::isinf(b.bias) ? -INFINITY : row[b.id] + b.bias;
      double sum = 0.0;
      for (double x : row) sum += std::exp(x);
      const double norm = std::log(sum);
      std::vector<int32_t> order(vocab);
      for (int32_t id = 0; id < vocab; ++id) order[id] = id;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      const StepEvent& e = events[i];
      ASSERT_TRUE(e.logprob.has_value());
      EXPECT_NEAR(*e.logprob, row[20] - norm, 1e-5) << i;
      ASSERT_EQ(e.top.size(), 3u);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(e.top[k].id, order[k]) << i << " " << k;
        EXPECT_NEAR(e.top[k].logprob, row[order[k]] - norm, 1e-5) << i << " " << k;
      }
    }
    // Step 1's peak (8) is biased down to -10: its alternatives are 20, 0 and then the zeros.
    EXPECT_EQ(events[1].top[1].id, 0);
    EXPECT_EQ(events[1].top[2].id, 1);
  }
}

// The distribution a step drew from (StepEvent::sampled_top), against a naive computation here of
// every transform in the sampler's order -- bias, bans, CTRL penalty over the sequence so far,
// temperature, softmax, top-k, top-p -- from the scripted logits; asking for it changes no id.
TEST(GeneratorScriptedTest, SampledTopIsTheDistributionDrawnFrom) {
  const std::vector<int32_t> full = {4, 5, 6, 7, 8, 9, 10, 11, 12};
  const int64_t vocab = 32;
  const std::vector<sampling::TokenBias> bias = {{0, 0.5f},   {1, -0.3f}, {2, 1.2f},  {5, 0.8f},   {7, -19.0f},
                                                 {8, -19.5f}, {9, -18.0f}, {10, -19.2f}, {11, -INFINITY},
                                                 {13, 2.0f},  {14, 1.7f}};
  for (const auto& [top_k, top_p] : {std::pair{0, 0.0f}, std::pair{6, 0.0f}, std::pair{0, 0.8f}, std::pair{9, 0.9f}}) {
    GenerateOptions o;
    o.max_new_tokens = 5;
    o.sampling.temperature = 0.7f;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.repetition_penalty = 1.3f;
    o.sampling.seed = 17;
    o.sampling.banned_ids = {3};
    o.sampling.logit_bias = bias;
    ScriptedModel plain_model(ScriptConfig(vocab, 64), ScriptOf(full));
    Sequence plain_seq(plain_model.config());
    const GenerateResult plain = Generate(plain_model, plain_seq, std::span(full).first(3), o);

    ScriptedModel m(ScriptConfig(vocab, 64), ScriptOf(full));
    Sequence seq(m.config());
    std::vector<StepEvent> events;
    o.sampled_top_logprobs = static_cast<int32_t>(vocab);
    o.on_token = [&](const StepEvent& e) { events.push_back(e); };
    const GenerateResult r = Generate(m, seq, std::span(full).first(3), o);
    EXPECT_EQ(r.new_tokens, plain.new_tokens) << "asking for the distribution changed a sampled id";
    ASSERT_EQ(events.size(), 5u);
    std::vector<int32_t> history(full.begin(), full.begin() + 3);
    for (size_t i = 0; i < events.size(); ++i) {
      std::vector<double> row(vocab, 0.0);
      row[full[3 + i]] = kPeak;  // position 2 + i's scripted row
      for (const sampling::TokenBias& b : bias) row[b.id] = std::isinf(b.bias) ? -INFINITY : row[b.id] + b.bias;
      row[3] = -INFINITY;
      std::vector<bool> seen(vocab, false);
      for (int32_t id : history) {
        if (seen[id] || std::isinf(row[id])) continue;
        seen[id] = true;
        row[id] = row[id] > 0 ? row[id] / 1.3 : row[id] * 1.3;
      }
      std::vector<std::pair<double, int32_t>> p;  // (probability, id), best first, ties by id
      double max_logit = -INFINITY;
      for (double x : row) max_logit = std::max(max_logit, x / 0.7);
      for (int32_t id = 0; id < vocab; ++id) {
        if (!std::isinf(row[id])) p.push_back({std::exp(row[id] / 0.7 - max_logit), id});
      }
      std::stable_sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      if (top_k > 0 && p.size() > static_cast<size_t>(top_k)) p.resize(top_k);
      double sum = 0.0;
      for (const auto& e : p) sum += e.first;
      for (auto& e : p) e.first /= sum;
      if (top_p > 0.0f) {
        double cumulative = 0.0;
        size_t keep = 0;
        while (keep < p.size() && cumulative < top_p) cumulative += p[keep++].first;
        p.resize(keep);
        sum = 0.0;
        for (const auto& e : p) sum += e.first;
        for (auto& e : p) e.first /= sum;
      }
      const StepEvent& e = events[i];
      ASSERT_EQ(e.sampled_top.size(), p.size()) << "step " << i << " top_k " << top_k << " top_p " << top_p;
      std::optional<double> drawn;
      for (size_t k = 0; k < p.size(); ++k) {
        EXPECT_EQ(e.sampled_top[k].id, p[k].second) << i << " " << k;
        EXPECT_NEAR(e.sampled_top[k].logprob, std::log(p[k].first), 1e-5) << i << " " << k;
        if (p[k].second == e.id) drawn = std::log(p[k].first);
      }
      ASSERT_TRUE(drawn.has_value()) << "the drawn id " << e.id << " is outside the distribution";
      ASSERT_TRUE(e.sampled_logprob.has_value());
      EXPECT_NEAR(*e.sampled_logprob, *drawn, 1e-5);
      history.push_back(e.id);
    }
  }
  // Greedy: the argmax alone, with probability 1; at most sampled_top_logprobs ids otherwise.
  ScriptedModel m(ScriptConfig(vocab, 64), ScriptOf(full));
  Sequence seq(m.config());
  std::vector<StepEvent> events;
  GenerateOptions o = Greedy(3);
  o.sampled_top_logprobs = 4;
  o.on_token = [&](const StepEvent& e) { events.push_back(e); };
  (void)Generate(m, seq, std::span(full).first(3), o);
  ASSERT_EQ(events.size(), 3u);
  for (const StepEvent& e : events) {
    ASSERT_EQ(e.sampled_top.size(), 1u);
    EXPECT_EQ(e.sampled_top[0].id, e.id);
    EXPECT_EQ(e.sampled_top[0].logprob, 0.0f);
    EXPECT_EQ(e.sampled_logprob, 0.0f);
    EXPECT_TRUE(e.top.empty());
  }
}

TEST(GeneratorScriptedTest, LogprobsTopAlternativesAndTrace) {
  const std::vector<int32_t> full = {4, 5, 6, 7, 8, 9, 10};
  const int64_t vocab = 32;
  ScriptedModel m(ScriptConfig(vocab, 64), ScriptOf(full));
  Sequence seq(m.config());
  std::vector<StepEvent> events;
  GenerateOptions o = Greedy(4);
  o.want_logprobs = true;
  o.top_logprobs = 3;
  o.trace_layer = 0;
  o.on_token = [&](const StepEvent& e) { events.push_back(e); };
  const GenerateResult r = Generate(m, seq, std::span(full).first(3), o);
  ASSERT_EQ(events.size(), 4u);
  // log_softmax of one kPeak and V-1 zeros, computed here in double.
  const double norm = std::log(std::exp(double(kPeak)) + double(vocab - 1));
  const float peak_lp = static_cast<float>(kPeak - norm);
  const float zero_lp = static_cast<float>(-norm);
  for (size_t i = 0; i < events.size(); ++i) {
    const StepEvent& e = events[i];
    EXPECT_EQ(e.id, r.new_tokens[i]);
    EXPECT_EQ(e.index, static_cast<int32_t>(i));
    ASSERT_TRUE(e.logprob.has_value());
    EXPECT_NEAR(*e.logprob, peak_lp, 1e-5);
    ASSERT_EQ(e.top.size(), 3u);
    EXPECT_EQ(e.top[0].id, e.id);
    EXPECT_NEAR(e.top[0].logprob, peak_lp, 1e-5);
    EXPECT_NEAR(e.top[1].logprob, zero_lp, 1e-5);
    EXPECT_EQ(e.top[1].id, 0);  // ties: lower id first
    EXPECT_EQ(e.top[2].id, 1);
    // The attention row of the position that produced this id: query position 2 + i.
    ASSERT_TRUE(e.attention.has_value());
    EXPECT_EQ(e.attention->heads, 2);
    EXPECT_EQ(e.attention->length, static_cast<int64_t>(3 + i));
    EXPECT_EQ(e.attention->probs, std::vector<float>(2 * (3 + i), float(2 + i)));
  }
  ExpectEachPositionFedOnce(m, seq.tokens, 6);
}

TEST(GeneratorScriptedTest, GenerationTaskBatchedDecode) {
  // Two sequences driven by one Decode call per step give the same ids as alone.
  std::vector<int32_t> full;
  for (int i = 0; i < 40; ++i) full.push_back(4 + (i * 5) % 17);
  ScriptedModel m(ScriptConfig(32, 64), ScriptOf(full));
  Sequence a(m.config()), b(m.config());
  GenerationTask ta(m, a, Greedy(6)), tb(m, b, Greedy(9));
  ta.Start(std::span(full).first(4));
  tb.Start(std::span(full).first(11));
  int batched_calls = 0;
  while (!ta.done() || !tb.done()) {
    std::vector<GenerationTask*> ready;
    for (GenerationTask* t : {&ta, &tb}) {
      if (t->PrepareStep()) ready.push_back(t);
    }
    std::vector<int32_t> ids;
    std::vector<KvCache*> caches;
    for (GenerationTask* t : ready) {
      ids.push_back(t->decode_token());
      caches.push_back(&t->cache());
    }
    const std::vector<float> logits = m.Decode(ids, caches, nullptr);
    ++batched_calls;
    const size_t vocab = static_cast<size_t>(m.config().vocab_size);
    for (size_t i = 0; i < ready.size(); ++i) {
      ready[i]->AcceptDecodeLogits(std::span<const float>(logits).subspan(i * vocab, vocab));
    }
  }
  EXPECT_EQ(ta.TakeResult().new_tokens, std::vector<int32_t>(full.begin() + 4, full.begin() + 10));
  EXPECT_EQ(tb.TakeResult().new_tokens, std::vector<int32_t>(full.begin() + 11, full.begin() + 20));
  EXPECT_EQ(batched_calls, 8);
}

TEST(GeneratorScriptedTest, ViolatedRequiresThrowWithoutChanges) {
  ScriptedModel m(ScriptConfig(32, 8), {});
  Sequence seq(m.config());
  EXPECT_THROW(Generate(m, seq, std::vector<int32_t>{40}, Greedy(1)), std::out_of_range);
  EXPECT_THROW(Generate(m, seq, std::vector<int32_t>(9, 1), Greedy(1)), std::invalid_argument);
  EXPECT_THROW(Generate(m, seq, {}, Greedy(1)), std::invalid_argument);
  GenerateOptions bad = Greedy(1);
  bad.sampling.top_k = -1;
  EXPECT_THROW(Generate(m, seq, std::vector<int32_t>{1}, bad), std::invalid_argument);
  EXPECT_TRUE(seq.tokens.empty());
  EXPECT_EQ(m.prefill_calls + m.forward_calls, 0);
}

// ---------------------------------------------------------------- a real random Transformer

class GeneratorTransformerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelConfig config = niels::testing::TinyConfig();
    config.context = 128;
    model_ = new model::Transformer(config, model::RandomWeights(config, 1234));
  }
  static void TearDownTestSuite() { delete model_; }

  static std::vector<int32_t> RandomPrompt(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(model_->config().vocab_size) - 1);
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = dist(gen);
    return ids;
  }

  // Reference: greedy loop of a full Forward over exactly the sequence's tokens (all positions),
  // taking the argmax of the last row with a plain loop.
  static std::vector<int32_t> ReferenceGreedy(std::vector<int32_t> tokens, int n) {
    std::vector<int32_t> out;
    for (int step = 0; step < n; ++step) {
      const std::vector<float> logits = model_->Forward(tokens, /*last_only=*/false);
      const int64_t vocab = model_->config().vocab_size;
      const float* x = logits.data() + (static_cast<int64_t>(tokens.size()) - 1) * vocab;
      int32_t best = 0;
      for (int32_t i = 1; i < vocab; ++i) {
        if (x[i] > x[best]) best = i;
      }
      out.push_back(best);
      tokens.push_back(best);
    }
    return out;
  }

  static model::Transformer* model_;
};
model::Transformer* GeneratorTransformerTest::model_ = nullptr;

TEST_F(GeneratorTransformerTest, GreedyCachedUncachedAndFullForwardAgree) {
  const size_t lengths[] = {1, 17, 40};
  for (size_t k = 0; k < 3; ++k) {
    const std::vector<int32_t> prompt = RandomPrompt(lengths[k], 100 + k);
    Sequence cached(model_->config()), uncached(model_->config());
    const GenerateResult rc = Generate(*model_, cached, prompt, Greedy(64, true));
    const GenerateResult ru = Generate(*model_, uncached, prompt, Greedy(64, false));
    ASSERT_EQ(rc.new_tokens.size(), 64u);
    EXPECT_EQ(rc.new_tokens, ru.new_tokens) << "prompt " << k;
    EXPECT_EQ(rc.new_tokens, ReferenceGreedy(prompt, 64)) << "prompt " << k;
    EXPECT_EQ(cached.cache.length(), static_cast<int64_t>(cached.tokens.size()) - 1);
  }
}

TEST_F(GeneratorTransformerTest, SplitCallsEqualOneCall) {
  // Prefill-only, then empty input, then more input: the same as the reference over the sequence.
  const std::vector<int32_t> prompt = RandomPrompt(20, 7);
  const std::vector<int32_t> more = RandomPrompt(6, 8);
  Sequence seq(model_->config());
  Generate(*model_, seq, prompt, Greedy(0));
  const GenerateResult r1 = Generate(*model_, seq, {}, Greedy(10));
  EXPECT_EQ(r1.new_tokens, ReferenceGreedy(prompt, 10));
  const GenerateResult r2 = Generate(*model_, seq, more, Greedy(10));
  const std::vector<int32_t> history(seq.tokens.begin(), seq.tokens.end() - 10);
  EXPECT_EQ(r2.new_tokens, ReferenceGreedy(history, 10));
  EXPECT_EQ(r2.reused_tokens, 29);
  EXPECT_EQ(r2.prefilled_tokens, 7);
}

// The chunked uncached path gives bitwise the logprobs of the full forward it replaces.
TEST_F(GeneratorTransformerTest, ChunkedUncachedForwardEqualsTheFullForward) {
  const std::vector<int32_t> prompt = RandomPrompt(37, 11);
  std::vector<float> whole, chunked;
  for (int64_t chunk : {int64_t{0}, int64_t{5}}) {
    GenerateOptions options = Greedy(8, /*cached=*/false);
    options.want_logprobs = true;
    std::vector<float>& out = chunk == 0 ? whole : chunked;
    options.on_token = [&out](const StepEvent& event) { out.push_back(event.logprob.value_or(1.0f)); };
    Sequence seq(model_->config());
    GenerationTask task(*model_, seq, options);
    task.Start(prompt, chunk);
    while (!task.done()) task.Step();
  }
  ASSERT_EQ(whole.size(), 8u);
  EXPECT_EQ(whole, chunked);
}

TEST_F(GeneratorTransformerTest, ContextFullAtTBothPaths) {
  const std::vector<int32_t> prompt = RandomPrompt(100, 9);
  for (bool cached : {true, false}) {
    Sequence seq(model_->config());
    const GenerateResult r = Generate(*model_, seq, prompt, Greedy(500, cached));
    EXPECT_EQ(r.stop_reason, StopReason::kContextFull);
    EXPECT_EQ(seq.tokens.size(), 128u);
    EXPECT_EQ(r.new_tokens.size(), 28u);
  }
}

}  // namespace
}  // namespace niels::daemon::engine
