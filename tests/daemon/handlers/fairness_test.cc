// What one request may make the engine thread do before another user's next decode step (engine.h,
// "Scheduling"), counted per iteration through EngineOptions::on_iteration with the tiny real
// model: a system prompt is prefilled in --prefill-chunk pieces between another session's decode
// steps, quick requests start a bounded number of bytes per iteration, an uncached request's
// forward is chunked like any prefill, and one uid holds at most --max-running-per-uid rows.

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/engine.h"
#include "daemon/handlers/proto_convert.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace fairness_test {  // this file's own names: the suite compiles as one unity unit

using engine::IterationWork;

constexpr int64_t kContext = 256;
constexpr int64_t kChunk = 8;

// Every iteration's record, collected on the engine thread.
struct Iterations {
  std::mutex mutex;
  std::vector<IterationWork> records;
  std::vector<IterationWork> Take() {
    std::lock_guard lock(mutex);
    return records;
  }
};

std::unique_ptr<Service> StartCounted(const std::shared_ptr<Iterations>& iterations, EngineOptions options = {}) {
  options.threads = 1;
  options.prefill_chunk = kChunk;
  options.on_iteration = [iterations](const IterationWork& work) {
    std::lock_guard lock(iterations->mutex);
    iterations->records.push_back(work);
  };
  return StartEngine(kContext, std::move(options));
}

std::string NewSession(Service& engine, uint32_t uid = kUid) {
  const v1::Response response = Call(engine, CreateRequest(), uid);
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

std::vector<int32_t> Ids(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((seed * 131 + i * 17) % 300 + 5));
  return ids;
}

// A streamed generation of `new_tokens` ids on a new session of `uid` whose engine thread blocks
// in its first event until the sink is released: everything submitted meanwhile waits for the same
// iteration, and the generation then decodes while it is served.
std::shared_ptr<BlockingSink> StartBlockedDecode(Service& engine, int new_tokens, uint32_t uid = kOtherUid) {
  const std::string session = NewSession(engine, uid);
  v1::Request request = GenerateRequest(session, Ids(6, 1), new_tokens);
  request.mutable_generate()->set_stream(true);
  auto sink = std::make_shared<BlockingSink>();
  SubmitAsync(engine, request, uid, nullptr, sink);
  sink->WaitEntered();
  return sink;
}

// The iterations of `records` whose model step prefilled and decoded.
int DecodingPrefillIterations(const std::vector<IterationWork>& records) {
  int count = 0;
  for (const IterationWork& work : records) count += work.prefill_tokens > 0 && work.decode_rows > 0 ? 1 : 0;
  return count;
}

TEST(FairnessTest, ASystemPromptIsPrefilledInChunksBetweenAnotherSessionsDecodeSteps) {
  auto iterations = std::make_shared<Iterations>();
  auto engine = StartCounted(iterations);
  std::string system;
  for (int i = 0; system.size() < 300; ++i) system += "the quick brown fox " + std::to_string(i) + " jumps. ";
  auto decoding = StartBlockedDecode(*engine, 120);
  auto created = SubmitAsync(*engine, CreateRequest(&system));
  decoding->Release();
  const v1::Response response = created->Wait();
  ASSERT_TRUE(response.has_create_session()) << response.DebugString();
  const int64_t length = response.create_session().length();
  ASSERT_GE(length, 6 * kChunk) << "the system prompt must take several chunks";
  ASSERT_LT(length, kContext);
  // The session holds its prompt prefilled, as before.
  const v1::Response info = Call(*engine, GetRequest(response.create_session().session_id()));
  EXPECT_EQ(info.get_session().session().cached_tokens(), length);
  ASSERT_TRUE(decoding->Wait().has_generate());

  int64_t prefilled = 0;
  for (const IterationWork& work : iterations->Take()) {
    // Nothing is prefilled while requests are started; every model step holds at most one chunk.
    EXPECT_EQ(work.start_prefill_tokens, 0);
    EXPECT_LE(work.prefill_tokens, kChunk);
    prefilled += work.prefill_tokens;
  }
  EXPECT_GE(prefilled, length - 1);
  // The other session decoded in the steps that prefilled the prompt: at least one decode row
  // between any two of its chunks.
  EXPECT_GE(DecodingPrefillIterations(iterations->Take()), static_cast<int>(length / kChunk) - 1);
}

TEST(FairnessTest, QuickRequestsStartABoundedNumberOfBytesPerIteration) {
  auto iterations = std::make_shared<Iterations>();
  auto engine = StartCounted(iterations);
  const std::string text(kMaxTokenizeTextBytes, 'a');  // at the limit: accepted
  auto decoding = StartBlockedDecode(*engine, 100);
  std::vector<std::shared_ptr<RecordingSink>> tokenized;
  constexpr int kRequests = 8;
  for (int i = 0; i < kRequests; ++i) {
    v1::Request request;
    request.mutable_tokenize()->set_text(text);
    tokenized.push_back(SubmitAsync(*engine, request));
  }
  decoding->Release();
  for (auto& sink : tokenized) EXPECT_TRUE(sink->Wait().has_tokenize());
  ASSERT_TRUE(decoding->Wait().has_generate());

  int with_decode = 0;
  for (const IterationWork& work : iterations->Take()) {
    // One maximal Tokenize per iteration: the bytes started never pass the per-iteration budget by
    // more than the one request that is always let in.
    EXPECT_LE(work.started_bytes, engine::kStartBytesPerIteration + text.size() + 64);
    EXPECT_LE(work.quick_answered, 1 + static_cast<int64_t>(engine::kStartBytesPerIteration / text.size()));
    if (work.quick_answered > 0 && work.decode_rows > 0) ++with_decode;
  }
  // The Tokenize requests were spread over the other session's decode steps.
  EXPECT_GE(with_decode, kRequests / 2);
}

TEST(FairnessTest, TokenizeAndDetokenizeRefuseInputsPastTheirLimits) {
  auto iterations = std::make_shared<Iterations>();
  auto engine = StartCounted(iterations);
  v1::Request tokenize;
  tokenize.mutable_tokenize()->set_text(std::string(kMaxTokenizeTextBytes + 1, 'a'));
  const v1::Response refused = Call(*engine, tokenize);
  EXPECT_EQ(ErrorOf(refused), v1::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message().find(std::to_string(kMaxTokenizeTextBytes)), std::string::npos)
      << refused.error().message();

  v1::Request detokenize;
  for (size_t i = 0; i < kMaxDetokenizeIds; ++i) detokenize.mutable_detokenize()->add_ids(5);
  EXPECT_TRUE(Call(*engine, detokenize).has_detokenize());  // at the limit
  detokenize.mutable_detokenize()->add_ids(5);
  const v1::Response too_many = Call(*engine, detokenize);
  EXPECT_EQ(ErrorOf(too_many), v1::INVALID_ARGUMENT);
  EXPECT_NE(too_many.error().message().find(std::to_string(kMaxDetokenizeIds)), std::string::npos)
      << too_many.error().message();

  v1::Request create = CreateRequest();
  create.mutable_create_session()->set_system_prompt(std::string(kMaxSystemPromptBytes + 1, 'a'));
  const v1::Response long_prompt = Call(*engine, create);
  EXPECT_EQ(ErrorOf(long_prompt), v1::INVALID_ARGUMENT);
  EXPECT_NE(long_prompt.error().message().find(std::to_string(kMaxSystemPromptBytes)), std::string::npos)
      << long_prompt.error().message();
}

TEST(FairnessTest, AnUncachedRequestsForwardIsChunkedLikeAnyPrefill) {
  auto iterations = std::make_shared<Iterations>();
  auto engine = StartCounted(iterations);
  const std::vector<int32_t> prompt = Ids(60, 3);
  // The reference: the cached path on a session of its own (greedy: the same ids on both paths).
  const v1::Response cached = Call(*engine, GenerateRequest(NewSession(*engine), prompt, 6));
  ASSERT_TRUE(cached.has_generate()) << cached.DebugString();
  const std::string sessions[] = {NewSession(*engine), NewSession(*engine)};

  auto decoding = StartBlockedDecode(*engine, 200);
  const size_t first = iterations->Take().size();
  std::vector<std::shared_ptr<RecordingSink>> uncached;
  for (const std::string& session : sessions) {  // two at once: one forward window in flight at a time
    v1::Request request = GenerateRequest(session, prompt, 6);
    request.mutable_generate()->set_use_kv_cache(false);
    uncached.push_back(SubmitAsync(*engine, request));
  }
  decoding->Release();
  for (auto& sink : uncached) {
    const v1::Response response = sink->Wait();
    ASSERT_TRUE(response.has_generate()) << response.DebugString();
    EXPECT_FALSE(response.generate().stats().used_kv_cache());
    EXPECT_EQ(std::vector<int32_t>(response.generate().new_ids().begin(), response.generate().new_ids().end()),
              std::vector<int32_t>(cached.generate().new_ids().begin(), cached.generate().new_ids().end()));
  }
  ASSERT_TRUE(decoding->Wait().has_generate());
  const std::vector<IterationWork> records = iterations->Take();
  int64_t forwarded = 0;
  for (size_t i = first; i < records.size(); ++i) {
    EXPECT_LE(records[i].prefill_tokens, kChunk) << "iteration " << i;
    forwarded += records[i].prefill_tokens;
  }
  // Each of the 6 ids of each request took a forward over its whole window (60..65 positions).
  EXPECT_GE(forwarded, 2 * 6 * 60);
}

// A sink that, as its own final response is sent, counts how many of `watched` had sent theirs.
class FinalCountingSink : public RecordingSink {
 public:
  std::vector<std::shared_ptr<RecordingSink>> watched;
  std::atomic<int> finished_before{-1};

  bool Send(v1::Response response, bool final) override {
    if (final) {
      int finished = 0;
      for (const auto& sink : watched) finished += sink->finals();
      finished_before = finished;
    }
    return RecordingSink::Send(std::move(response), final);
  }
};

TEST(FairnessTest, OneUidHoldsAtMostItsRowsAndAnotherUidIsAdmittedBeside) {
  auto iterations = std::make_shared<Iterations>();
  EngineOptions options;
  options.max_batch = 4;  // --max-running-per-uid defaults to max_batch - 1 = 3
  auto engine = StartCounted(iterations, options);
  std::vector<std::string> sessions;
  for (int i = 0; i < 5; ++i) sessions.push_back(NewSession(*engine));
  const std::string other_session = NewSession(*engine, kOtherUid);
  // kUid's five long requests are admitted while the engine is free of other users; the first of
  // them holds the engine thread in its first event, so its rows are taken before the other uid asks.
  auto decoding = StartBlockedDecode(*engine, 100, kUid);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  auto first = std::make_shared<BlockingSink>();
  for (int i = 0; i < 5; ++i) {
    v1::Request request = GenerateRequest(sessions[i], Ids(5, i), 100);
    request.mutable_generate()->set_stream(true);
    sinks.push_back(SubmitAsync(*engine, request, kUid, nullptr, i == 0 ? first : nullptr));
  }
  decoding->Release();
  first->WaitEntered();
  // The other uid's sink counts, when its final response is sent (on the engine thread, so in the
  // engine's order, however late this thread runs), how many of kUid's requests had ended.
  auto other = std::make_shared<FinalCountingSink>();
  other->watched = sinks;
  other->watched.push_back(decoding);
  SubmitAsync(*engine, GenerateRequest(other_session, Ids(5, 9), 10), kOtherUid, nullptr, other);
  first->Release();
  EXPECT_TRUE(other->Wait().has_generate());
  // The other uid's short request did not wait for any of kUid's long ones to end.
  EXPECT_EQ(other->finished_before.load(), 0);
  for (auto& sink : sinks) EXPECT_TRUE(sink->Wait().has_generate());
  ASSERT_TRUE(decoding->Wait().has_generate());

  bool other_beside_three = false;
  for (const IterationWork& work : iterations->Take()) {
    auto rows = [&](uint32_t uid) {
      auto it = work.running_per_uid.find(uid);
      return it == work.running_per_uid.end() ? int64_t{0} : it->second;
    };
    EXPECT_LE(rows(kUid), 3);
    if (rows(kOtherUid) == 1 && rows(kUid) == 3) other_beside_three = true;
  }
  EXPECT_TRUE(other_beside_three);
}

TEST(FairnessTest, MaxRunningPerUidIsTheFlagsValue) {
  auto iterations = std::make_shared<Iterations>();
  EngineOptions options;
  options.max_batch = 4;
  options.max_running_per_uid = 2;
  auto engine = StartCounted(iterations, options);
  std::vector<std::string> sessions;
  for (int i = 0; i < 4; ++i) sessions.push_back(NewSession(*engine));
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  auto decoding = StartBlockedDecode(*engine, 30, kUid);
  for (int i = 0; i < 4; ++i) sinks.push_back(SubmitAsync(*engine, GenerateRequest(sessions[i], Ids(5, i), 20)));
  decoding->Release();
  for (auto& sink : sinks) EXPECT_TRUE(sink->Wait().has_generate());
  ASSERT_TRUE(decoding->Wait().has_generate());
  int64_t most = 0;
  for (const IterationWork& work : iterations->Take()) {
    for (const auto& [uid, rows] : work.running_per_uid) most = std::max(most, rows);
  }
  EXPECT_EQ(most, 2);
}

}  // namespace fairness_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
