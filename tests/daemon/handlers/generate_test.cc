// Raw Generate through the engine: the seeds' cache semantics, the context limit, per-step extras
// checked against an independent full forward, validation and atomic cancel.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace generate_test {  // this file's own names: the suite compiles as one unity unit

using Ids = std::vector<int32_t>;

constexpr int64_t kContext = 64;

Ids ToIds(const google::protobuf::RepeatedField<int32_t>& field) { return Ids(field.begin(), field.end()); }

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = StartEngine(kContext);
    model_ = LoadTinyModel(kContext);
    eot_ = model_->special.eot;
    session_ = Call(*engine_, CreateRequest()).create_session().session_id();
  }
  // Plain-text ids (never special) of length n.
  Ids Prompt(size_t n) const {
    Ids ids;
    while (ids.size() < n) {
      for (int32_t id : niels::testing::EncodeText(*model_->tokenizer, niels::testing::TinyCorpus().at(ids.size() % 3))) {
        if (ids.size() < n) ids.push_back(id);
      }
    }
    return ids;
  }
  v1::Response Generate(const Ids& input, int max_new_tokens, bool ban_eot = true) {
    v1::Request request = GenerateRequest(session_, input, max_new_tokens);
    if (ban_eot) request.mutable_generate()->mutable_sampling()->add_banned_ids(eot_);
    return Call(*engine_, request);
  }
  Ids Tokens() { return ToIds(Call(*engine_, GetRequest(session_)).get_session().token_ids()); }
  int64_t Cached() { return Call(*engine_, GetRequest(session_)).get_session().session().cached_tokens(); }
  // Reference: log_softmax (in double) of an uncached full forward over `tokens`, at its last
  // position.
  std::vector<double> ReferenceLogprobs(const Ids& tokens) const {
    const std::vector<float> logits = model_->transformer->Forward(tokens, /*last_only=*/true);
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(x - max);
    std::vector<double> logprobs(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) logprobs[i] = logits[i] - max - std::log(sum);
    return logprobs;
  }
  // The ids of the n largest values, largest first (ties: lower id first).
  static Ids TopIds(const std::vector<double>& values, size_t n) {
    Ids ids(values.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return values[a] > values[b]; });
    ids.resize(n);
    return ids;
  }

  std::unique_ptr<Service> engine_;
  std::unique_ptr<loaders::Model> model_;
  int32_t eot_ = -1;
  std::string session_;
};

TEST_F(GenerateTest, ZeroNewTokensOnlyPrefills) {
  const Ids input = Prompt(10);
  const v1::Response response = Generate(input, 0);
  ASSERT_TRUE(response.has_generate()) << response.DebugString();
  EXPECT_EQ(response.generate().new_ids_size(), 0);
  EXPECT_EQ(response.generate().stop_reason(), v1::MAX_TOKENS);
  EXPECT_EQ(response.generate().session_length(), 10);
  EXPECT_EQ(response.generate().stats().prefilled_tokens(), 10);
  EXPECT_EQ(response.generate().stats().generated_tokens(), 0);
  EXPECT_EQ(Tokens(), input);
  EXPECT_EQ(Cached(), 10);
}

TEST_F(GenerateTest, EmptyInputContinuesGreedilyLikeAFullForward) {
  Ids tokens = Prompt(7);
  ASSERT_TRUE(Generate(tokens, 0).has_generate());
  const v1::Response first = Generate({}, 3);
  ASSERT_TRUE(first.has_generate()) << first.DebugString();
  const v1::Response second = Generate({}, 4);
  ASSERT_TRUE(second.has_generate()) << second.DebugString();
  Ids generated = ToIds(first.generate().new_ids());
  const Ids more = ToIds(second.generate().new_ids());
  generated.insert(generated.end(), more.begin(), more.end());
  ASSERT_EQ(generated.size(), 7u);
  EXPECT_EQ(second.generate().session_length(), 14);
  for (int32_t id : generated) {  // greedy reference with eot banned
    std::vector<double> logprobs = ReferenceLogprobs(tokens);
    logprobs[eot_] = -INFINITY;
    EXPECT_EQ(id, TopIds(logprobs, 1)[0]);
    tokens.push_back(id);
  }
  EXPECT_EQ(Tokens(), tokens);
  // Only the last sampled id of the first call was new to the second call's prefill.
  EXPECT_EQ(second.generate().stats().prefilled_tokens(), 1);
  EXPECT_EQ(second.generate().stats().reused_tokens(), 9);
}

TEST_F(GenerateTest, StopsWithContextFullAtT) {
  const v1::Response response = Generate(Prompt(60), 100);
  ASSERT_TRUE(response.has_generate()) << response.DebugString();
  EXPECT_EQ(response.generate().stop_reason(), v1::CONTEXT_FULL);
  EXPECT_EQ(response.generate().new_ids_size(), 4);
  EXPECT_EQ(response.generate().session_length(), kContext);
  const v1::Response again = Generate({}, 5);
  ASSERT_TRUE(again.has_generate());
  EXPECT_EQ(again.generate().stop_reason(), v1::CONTEXT_FULL);
  EXPECT_EQ(again.generate().new_ids_size(), 0);
  const Ids before = Tokens();
  EXPECT_EQ(ErrorOf(Generate({5}, 0)), v1::INVALID_ARGUMENT);  // would exceed T
  EXPECT_EQ(Tokens(), before);
}

TEST_F(GenerateTest, StopIdsEndTheCallInclusively) {
  const Ids prompt = Prompt(8);
  // Greedy next id, then ask to stop on it.
  const int32_t next = TopIds(ReferenceLogprobs(prompt), 1)[0];
  v1::Request request = GenerateRequest(session_, prompt, 10);
  request.mutable_generate()->add_stop_ids(next);
  const v1::Response response = Call(*engine_, request);
  ASSERT_TRUE(response.has_generate()) << response.DebugString();
  EXPECT_EQ(ToIds(response.generate().new_ids()), Ids{next});
  EXPECT_EQ(response.generate().stop_reason(), v1::EOT);
}

TEST_F(GenerateTest, StepExtrasMatchAFullForward) {
  const Ids prompt = Prompt(12);
  for (bool stream : {false, true}) {
    session_ = Call(*engine_, CreateRequest()).create_session().session_id();
    v1::Request request = GenerateRequest(session_, prompt, 5);
    v1::GenerateRequest& generate = *request.mutable_generate();
    generate.set_want_logprobs(true);
    generate.set_top_logprobs(4);
    generate.set_trace_layer(1);
    generate.set_stream(stream);
    auto sink = SubmitAsync(*engine_, request);
    const v1::Response response = sink->Wait();
    ASSERT_TRUE(response.has_generate()) << response.DebugString();
    const Ids generated = ToIds(response.generate().new_ids());
    ASSERT_EQ(response.generate().steps_size(), static_cast<int>(generated.size()));
    Ids tokens = prompt;
    for (size_t i = 0; i < generated.size(); ++i) {
      const v1::StepInfo& step = response.generate().steps(static_cast<int>(i));
      EXPECT_EQ(step.id(), generated[i]);
      const std::vector<double> reference = ReferenceLogprobs(tokens);
      EXPECT_NEAR(step.logprob(), reference[generated[i]], 1e-4);
      ASSERT_EQ(step.top_size(), 4);
      const Ids top = TopIds(reference, 4);
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(step.top(k).id(), top[k]);
        EXPECT_NEAR(step.top(k).logprob(), reference[top[k]], 1e-4);
        EXPECT_EQ(step.top(k).piece(), model_->tokenizer->Piece(step.top(k).id()));
      }
      EXPECT_EQ(step.top(0).id(), step.id());  // greedy
      // Attention: one probability row per head over every position up to the one just fed.
      EXPECT_EQ(step.attention_heads(), model_->config.heads);
      EXPECT_EQ(step.attention_length(), static_cast<int32_t>(tokens.size()));
      ASSERT_EQ(step.attention_size(), step.attention_heads() * step.attention_length());
      for (int h = 0; h < step.attention_heads(); ++h) {
        double sum = 0;
        for (int p = 0; p < step.attention_length(); ++p) {
          const float a = step.attention(h * step.attention_length() + p);
          EXPECT_GE(a, 0.0f);
          sum += a;
        }
        EXPECT_NEAR(sum, 1.0, 1e-4);
      }
      tokens.push_back(generated[i]);
    }
    const std::vector<v1::Response> events = sink->events();
    if (stream) {
      ASSERT_EQ(events.size(), generated.size());
      for (size_t i = 0; i < events.size(); ++i) {
        EXPECT_EQ(events[i].token().id(), generated[i]);
        EXPECT_EQ(events[i].token().step().logprob(), response.generate().steps(static_cast<int>(i)).logprob());
      }
    } else {
      EXPECT_TRUE(events.empty());
    }
  }
}

TEST_F(GenerateTest, UncachedPathMatchesAndDropsTheCache) {
  const Ids prompt = Prompt(9);
  const v1::Response cached = Generate(prompt, 6);
  session_ = Call(*engine_, CreateRequest()).create_session().session_id();
  v1::Request request = GenerateRequest(session_, prompt, 6);
  request.mutable_generate()->set_use_kv_cache(false);
  request.mutable_generate()->mutable_sampling()->add_banned_ids(eot_);
  const v1::Response uncached = Call(*engine_, request);
  ASSERT_TRUE(cached.has_generate() && uncached.has_generate()) << uncached.DebugString();
  EXPECT_EQ(ToIds(uncached.generate().new_ids()), ToIds(cached.generate().new_ids()));
  EXPECT_FALSE(uncached.generate().stats().used_kv_cache());
  EXPECT_EQ(Cached(), 0);
}

TEST_F(GenerateTest, SameSeedSameTokens) {
  const Ids prompt = Prompt(5);
  v1::Request request = GenerateRequest(session_, prompt, 12);
  request.mutable_generate()->mutable_sampling()->set_temperature(1.0f);
  request.mutable_generate()->mutable_sampling()->set_seed(99);
  const v1::Response first = Call(*engine_, request);
  request.mutable_generate()->set_session_id(Call(*engine_, CreateRequest()).create_session().session_id());
  const v1::Response second = Call(*engine_, request);
  ASSERT_TRUE(first.has_generate() && second.has_generate());
  EXPECT_EQ(ToIds(first.generate().new_ids()), ToIds(second.generate().new_ids()));
}

TEST_F(GenerateTest, CancelAfterPrefillOnlyRestoresCacheExactly) {
  ASSERT_TRUE(Generate(Prompt(10), 0).has_generate());
  const Ids before = Tokens();
  ASSERT_EQ(Cached(), 10);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  auto sink = std::make_shared<RecordingSink>();
  sink->on_event = [cancel](const v1::Response&) {
    cancel->store(true);
    return true;
  };
  v1::Request request = GenerateRequest(session_, {}, 10);
  request.mutable_generate()->set_stream(true);
  SubmitAsync(*engine_, request, kUid, cancel, sink);
  EXPECT_EQ(ErrorOf(sink->Wait()), v1::CANCELLED);
  EXPECT_EQ(sink->events().size(), 1u);
  EXPECT_EQ(Tokens(), before);
  EXPECT_EQ(Cached(), 10);
}

TEST_F(GenerateTest, InvalidRequestsLeaveTheSessionUnchanged) {
  ASSERT_TRUE(Generate(Prompt(4), 0).has_generate());
  const Ids before = Tokens();
  const int32_t vocab = static_cast<int32_t>(model_->config.vocab_size);
  auto with = [&](auto change) {
    v1::Request request = GenerateRequest(session_, {1, 2}, 3);
    change(*request.mutable_generate());
    return ErrorOf(Call(*engine_, request));
  };
  EXPECT_EQ(with([&](v1::GenerateRequest& g) { g.add_input_ids(vocab); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.add_input_ids(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([&](v1::GenerateRequest& g) { g.add_stop_ids(vocab + 5); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_max_new_tokens(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_top_logprobs(1001); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_sampled_top_logprobs(1001); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_sampled_top_logprobs(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) {  // 65536 x 1000 alternatives: past step_alternative_entries
              g.set_max_new_tokens(1 << 16);
              g.set_top_logprobs(600);
              g.set_sampled_top_logprobs(400);
            }),
            v1::RESOURCE_EXHAUSTED);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_top_logprobs(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([&](v1::GenerateRequest& g) { g.set_trace_layer(static_cast<int32_t>(model_->config.layers)); }),
            v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.set_trace_layer(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) {
              g.set_trace_layer(0);
              g.set_use_kv_cache(false);
            }),
            v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::GenerateRequest& g) { g.mutable_sampling()->set_temperature(-2); }), v1::INVALID_ARGUMENT);
  // An attention trace that could outgrow a response (4 heads x 64 positions x 65536 steps x 4 bytes).
  EXPECT_EQ(with([](v1::GenerateRequest& g) {
              g.set_trace_layer(0);
              g.set_max_new_tokens(1 << 16);
            }),
            v1::INVALID_ARGUMENT);
  EXPECT_EQ(Tokens(), before);
  const std::string empty = Call(*engine_, CreateRequest()).create_session().session_id();
  EXPECT_EQ(ErrorOf(Call(*engine_, GenerateRequest(empty, {}, 3))), v1::INVALID_ARGUMENT);
  EXPECT_TRUE(Call(*engine_, GenerateRequest(empty, {}, 0)).has_generate());  // nothing to do is fine
}

}  // namespace generate_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
