// Stop strings in Generate and Chat through the service, on the tiny model with greedy sampling:
// the reply ends before the first match, streamed text joins to exactly that and never shows the
// match, the session keeps the ids wholly before it (tokens and KV: continuing equals a fresh
// session fed the same ids), and the limits are refused naming their budgets.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/budgets.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace stop_strings_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 64;
using Ids = std::vector<int32_t>;

Ids ToIdList(const google::protobuf::RepeatedField<int32_t>& ids) { return Ids(ids.begin(), ids.end()); }

std::string NewSessionId(Service& engine) {
  const v1::Response created = Call(engine, CreateRequest());
  EXPECT_TRUE(created.has_create_session()) << created.DebugString();
  return created.create_session().session_id();
}

std::string Detokenize(Service& engine, const Ids& ids) {
  v1::Request request;
  request.mutable_detokenize()->mutable_ids()->Add(ids.begin(), ids.end());
  const v1::Response response = Call(engine, request);
  EXPECT_TRUE(response.has_detokenize()) << response.DebugString();
  return response.detokenize().text();
}

Ids Prompt() {
  Ids ids;
  for (int i = 0; i < 10; ++i) ids.push_back(static_cast<int32_t>(40 + i * 13));
  return ids;
}

// A two-byte ASCII stop string first occurring at or after a third of `text`, and where.
std::pair<std::string, size_t> StopFrom(const std::string& text) {
  for (size_t at = text.size() / 3; at + 2 <= text.size(); ++at) {
    const std::string stop = text.substr(at, 2);
    if (static_cast<unsigned char>(stop[0]) >= 0x80 || static_cast<unsigned char>(stop[1]) >= 0x80) continue;
    if (text.find(stop) == at) return {stop, at};
  }
  return {"", std::string::npos};
}

// Sampled at temperature 1 with a fixed seed: the tiny model's greedy text is one byte piece
// repeated, its sampled text varied; the same seed samples the same ids up to any stop.
void Sampled(v1::Sampling* sampling) {
  sampling->set_temperature(1.0f);
  sampling->set_seed(11);
}

std::string JoinedText(RecordingSink& sink) {
  std::string out;
  for (const v1::Response& event : sink.events()) out += event.token().text();
  return out;
}

v1::Request GenerateWithStop(const std::string& session, const Ids& input, int n, const std::string& stop,
                             bool use_kv_cache) {
  v1::Request request = GenerateRequest(session, input, n);
  request.mutable_generate()->add_stop_strings(stop);
  request.mutable_generate()->set_stream(true);
  request.mutable_generate()->set_use_kv_cache(use_kv_cache);
  Sampled(request.mutable_generate()->mutable_sampling());
  return request;
}

TEST(StopStringsTest, GenerateEndsBeforeTheMatchAndRollsBackTheIdsReachingIntoIt) {
  auto engine = StartEngine(kContext);
  const Ids prompt = Prompt();
  v1::Request reference = GenerateRequest(NewSessionId(*engine), prompt, 30);
  Sampled(reference.mutable_generate()->mutable_sampling());
  const v1::Response full = Call(*engine, reference);
  ASSERT_TRUE(full.has_generate()) << full.DebugString();
  const Ids all = ToIdList(full.generate().new_ids());
  const std::string text = Detokenize(*engine, all);
  const auto [stop, at] = StopFrom(text);
  ASSERT_NE(at, std::string::npos) << "the greedy text is too short or repetitive: " << text;
  const std::string before = text.substr(0, at);

  for (bool cached : {true, false}) {
    SCOPED_TRACE(cached ? "cached" : "uncached");
    const std::string session = NewSessionId(*engine);
    auto sink = SubmitAsync(*engine, GenerateWithStop(session, prompt, 30, stop, cached));
    const v1::Response stopped = sink->Wait();
    ASSERT_TRUE(stopped.has_generate()) << stopped.DebugString();
    EXPECT_EQ(stopped.generate().stop_reason(), v1::STOP_STRING);
    EXPECT_EQ(stopped.generate().stop_string(), stop);
    const Ids kept = ToIdList(stopped.generate().new_ids());
    std::printf("[ stop ] %zu bytes of text, stop string at byte %zu: %zu of %zu ids kept\n", text.size(), at,
                kept.size(), all.size());
    // The kept ids are the longest run of the full reply's whose text lies wholly before the match.
    ASSERT_LT(kept.size(), all.size());
    EXPECT_TRUE(std::equal(kept.begin(), kept.end(), all.begin()));
    EXPECT_TRUE(before.starts_with(Detokenize(*engine, kept)));
    const Ids one_more(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kept.size()) + 1);
    EXPECT_FALSE(before.starts_with(Detokenize(*engine, one_more)));
    // The stream showed exactly the text before the match.
    const std::string streamed = JoinedText(*sink);
    EXPECT_EQ(streamed, before);
    EXPECT_EQ(streamed.find(stop), std::string::npos);
    // The session holds the prompt and the kept ids, its cache no more.
    EXPECT_EQ(stopped.generate().session_length(), static_cast<int64_t>(prompt.size() + kept.size()));
    const v1::Response got = Call(*engine, GetRequest(session));
    Ids expected = prompt;
    expected.insert(expected.end(), kept.begin(), kept.end());
    EXPECT_EQ(ToIdList(got.get_session().token_ids()), expected);
    EXPECT_LE(got.get_session().session().cached_tokens(), static_cast<int64_t>(expected.size()));
    // Continuing equals a fresh session given the same ids: the rolled-back KV is gone.
    const v1::Response more = Call(*engine, GenerateRequest(session, {}, 4));
    const v1::Response fresh = Call(*engine, GenerateRequest(NewSessionId(*engine), expected, 4));
    ASSERT_TRUE(more.has_generate() && fresh.has_generate()) << more.DebugString() << fresh.DebugString();
    EXPECT_EQ(ToIdList(more.generate().new_ids()), ToIdList(fresh.generate().new_ids()));
  }
}

TEST(StopStringsTest, AChatReplyEndsBeforeTheMatchAndTheSessionGoesOn) {
  auto engine = StartEngine(kContext);
  v1::Request reference = ChatRequest(NewSessionId(*engine), "hello there", 30);
  Sampled(reference.mutable_chat()->mutable_sampling());
  const v1::Response full = Call(*engine, reference);
  ASSERT_TRUE(full.has_chat()) << full.DebugString();
  const std::string reply = full.chat().reply();
  const auto [stop, at] = StopFrom(reply);
  ASSERT_NE(at, std::string::npos) << "the greedy reply is too short or repetitive: " << reply;

  const std::string session = NewSessionId(*engine);
  v1::Request request = ChatRequest(session, "hello there", 30, /*use_kv_cache=*/true, /*stream=*/true);
  request.mutable_chat()->add_stop_strings("a stop string the reply never reaches");
  request.mutable_chat()->add_stop_strings(stop);
  Sampled(request.mutable_chat()->mutable_sampling());
  auto sink = SubmitAsync(*engine, request);
  const v1::Response stopped = sink->Wait();
  ASSERT_TRUE(stopped.has_chat()) << stopped.DebugString();
  EXPECT_EQ(stopped.chat().stop_reason(), v1::STOP_STRING);
  EXPECT_EQ(stopped.chat().stop_string(), stop);
  EXPECT_EQ(stopped.chat().reply(), reply.substr(0, at));
  EXPECT_EQ(JoinedText(*sink), stopped.chat().reply());
  const Ids kept = ToIdList(stopped.chat().reply_ids());
  const Ids all = ToIdList(full.chat().reply_ids());
  ASSERT_LT(kept.size(), all.size());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), all.begin()));
  // The next turn runs on the shortened history.
  const v1::Response next = Call(*engine, ChatRequest(session, "and then?", 4));
  ASSERT_TRUE(next.has_chat()) << next.DebugString();
  EXPECT_GT(next.chat().session_length(), stopped.chat().session_length());
}

TEST(StopStringsTest, TheLimitsAreRefusedNamingTheirBudgets) {
  auto engine = StartEngine(kContext);
  const std::string session = NewSessionId(*engine);
  v1::Request many = GenerateRequest(session, Prompt(), 4);
  for (size_t i = 0; i <= common::kStopStringsLimit; ++i) many.mutable_generate()->add_stop_strings("x" + std::to_string(i));
  const v1::Response too_many = Call(*engine, many);
  ASSERT_EQ(ErrorOf(too_many), v1::INVALID_ARGUMENT) << too_many.DebugString();
  EXPECT_NE(too_many.error().message().find("(budget stop_strings)"), std::string::npos) << too_many.error().message();
  // At the limit it is served.
  many.mutable_generate()->mutable_stop_strings()->RemoveLast();
  EXPECT_TRUE(Call(*engine, many).has_generate());

  v1::Request chat = ChatRequest(session, "hi", 4);
  chat.mutable_chat()->add_stop_strings(std::string(common::kStopStringBytesLimit + 1, 'a'));
  const v1::Response too_long = Call(*engine, chat);
  ASSERT_EQ(ErrorOf(too_long), v1::INVALID_ARGUMENT) << too_long.DebugString();
  EXPECT_NE(too_long.error().message().find("(budget stop_string_bytes)"), std::string::npos) << too_long.error().message();

  chat.mutable_chat()->mutable_stop_strings(0)->clear();
  EXPECT_EQ(ErrorOf(Call(*engine, chat)), v1::INVALID_ARGUMENT);

  chat.mutable_chat()->mutable_stop_strings(0)->assign("ok");
  chat.mutable_chat()->mutable_constraint()->mutable_any_json();
  const v1::Response constrained = Call(*engine, chat);
  ASSERT_EQ(ErrorOf(constrained), v1::INVALID_ARGUMENT) << constrained.DebugString();
  EXPECT_NE(constrained.error().message().find("constraint"), std::string::npos);
  // Nothing of this changed the session.
  EXPECT_EQ(Call(*engine, GetRequest(session)).get_session().token_ids_size(), 14);
}

}  // namespace stop_strings_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
