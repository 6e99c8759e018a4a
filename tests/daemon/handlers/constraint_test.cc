// Structured output through the Service (the wire request in, the response out) with the tiny
// random-weight model: refusals before any token (the session unchanged, the daemon serving on),
// bitwise batch invariance of constrained requests (alone vs. batched with seven others, constrained
// or not; cached and uncached), streamed text equal to the reply, cancel, and Info.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "daemon/grammar/matcher.h"
#include "daemon/handlers/constraint.h"
#include "daemon/handlers/proto_convert.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace constraint_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 256;

constexpr char kPersonSchema[] =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"]})";

std::string CreateSession(Service& engine) {
  const v1::Response response = Call(engine, CreateRequest());
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::SessionInfo SessionOf(Service& engine, const std::string& id) {
  return Call(engine, GetRequest(id)).get_session().session();
}

v1::Request ConstrainedChat(const std::string& session, const std::string& text, int max_new_tokens,
                            const v1::Constraint& constraint, uint64_t seed) {
  v1::Request r = ChatRequest(session, text, max_new_tokens);
  *r.mutable_chat()->mutable_constraint() = constraint;
  r.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
  r.mutable_chat()->mutable_sampling()->set_top_k(0);
  r.mutable_chat()->mutable_sampling()->set_seed(seed);
  return r;
}

v1::Constraint Schema(const std::string& schema) {
  v1::Constraint c;
  c.set_json_schema(schema);
  return c;
}
v1::Constraint Gbnf(const std::string& grammar) {
  v1::Constraint c;
  c.set_gbnf(grammar);
  return c;
}
v1::Constraint AnyJson() {
  v1::Constraint c;
  c.mutable_any_json();
  return c;
}

// A refused request: the error, no stream events, the session exactly as before (length, cached
// tokens, turns), and the daemon answers the next request.
void ExpectRefused(Service& engine, const std::string& session, v1::Request request, v1::ErrorCode code,
                   const std::vector<std::string>& in_message) {
  const v1::SessionInfo before = SessionOf(engine, session);
  if (request.has_chat()) request.mutable_chat()->set_stream(true);
  if (request.has_generate()) request.mutable_generate()->set_stream(true);
  auto sink = SubmitAsync(engine, request);
  const v1::Response response = sink->Wait();
  EXPECT_EQ(ErrorOf(response), code) << response.DebugString();
  for (const std::string& part : in_message) {
    EXPECT_NE(response.error().message().find(part), std::string::npos)
        << "'" << part << "' not in: " << response.error().message();
  }
  EXPECT_TRUE(sink->events().empty()) << "no token before the refusal";
  const v1::SessionInfo after = SessionOf(engine, session);
  EXPECT_EQ(after.length(), before.length());
  EXPECT_EQ(after.cached_tokens(), before.cached_tokens());
  EXPECT_EQ(after.turns(), before.turns());
}

TEST(ConstraintTest, InvalidOrTooLargeConstraintsAreRefusedBeforeAnyToken) {
  auto engine = StartEngine(kContext);
  const std::string session = CreateSession(*engine);
  // One turn first, so the session has history and cache to keep.
  ASSERT_TRUE(Call(*engine, ChatRequest(session, "hello there", 5)).has_chat());
  struct Case {
    v1::Constraint constraint;
    std::vector<std::string> in_message;
  };
  const std::string huge(kMaxGbnfBytes + 1, ' ');
  std::vector<Case> cases = {
      {Schema(R"({"type": "object", "properties": {"a": )"), {"constraint.json_schema", "not valid JSON", "line 1, column"}},
      {Schema(R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})"),
       {"constraint.json_schema", "not", "/properties/a"}},
      {Schema(R"({"type":"string","format":"email"})"), {"constraint.json_schema", "format"}},
      {Gbnf("root ::= \"a\" | \n  b\n"), {"constraint.gbnf", "line 2, column 3", "b"}},
      {Gbnf("root ::= root \"x\"\n"), {"constraint.gbnf", "left recursion"}},
      {Gbnf("rot ::= \"x\"\n"), {"constraint.gbnf", "root"}},
      {Gbnf("root ::= [z-a]\n"), {"constraint.gbnf", "line 1"}},
      {Gbnf("root ::= \"x\"" + huge), {"constraint.gbnf", "too large", "262144"}},
      {Schema("{\"type\":\"string\"}" + std::string(kMaxJsonSchemaBytes, ' ')), {"constraint.json_schema", "too large", "65536"}},
      // Within the byte limit, beyond the symbol limit (a repetition copies its item).
      {Gbnf([] {
         std::string g = "root ::=";
         for (int i = 0; i < 101; ++i) g += " [a-z]{10000}";
         return g + "\n";
       }()),
       {"constraint.gbnf", "too large", "symbols"}},
      {v1::Constraint(), {"constraint", "json_schema, gbnf or any_json"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.constraint.ShortDebugString().substr(0, 120));
    ExpectRefused(*engine, session, ConstrainedChat(session, "go", 20, c.constraint, 1), v1::INVALID_ARGUMENT,
                  c.in_message);
    v1::Request generate = GenerateRequest(session, {5, 6}, 20);
    *generate.mutable_generate()->mutable_constraint() = c.constraint;
    ExpectRefused(*engine, session, generate, v1::INVALID_ARGUMENT, c.in_message);
  }
  // Generate: a text stop id, every stop id banned, nothing to generate.
  v1::Request text_stop = GenerateRequest(session, {5}, 20);
  *text_stop.mutable_generate()->mutable_constraint() = AnyJson();
  text_stop.mutable_generate()->add_stop_ids(100);
  ExpectRefused(*engine, session, text_stop, v1::INVALID_ARGUMENT, {"stop_ids[0] = 100", "text id"});
  const int32_t eot = LoadTinyModel(kContext)->special.eot;
  v1::Request banned_stop = GenerateRequest(session, {5}, 20);
  *banned_stop.mutable_generate()->mutable_constraint() = AnyJson();
  banned_stop.mutable_generate()->mutable_sampling()->add_banned_ids(eot);
  ExpectRefused(*engine, session, banned_stop, v1::INVALID_ARGUMENT, {"stop id", "banned"});
  v1::Request nothing = GenerateRequest(session, {5}, 0);
  *nothing.mutable_generate()->mutable_constraint() = AnyJson();
  ExpectRefused(*engine, session, nothing, v1::INVALID_ARGUMENT, {"max_new_tokens"});
  // An unknown session with a bad constraint: the constraint is checked first (before the queue).
  ExpectRefused(*engine, session, ConstrainedChat("0123", "go", 20, Gbnf("root ::= ("), 1), v1::INVALID_ARGUMENT,
                {"constraint.gbnf"});
  // The daemon keeps serving, constrained requests included.
  const v1::Response ok = Call(*engine, ConstrainedChat(session, "go", 40, Gbnf("root ::= \"yes\" | \"no\"\n"), 1));
  ASSERT_TRUE(ok.has_chat()) << ok.DebugString();
  EXPECT_TRUE(ok.chat().reply() == "yes" || ok.chat().reply() == "no") << ok.chat().reply();
  EXPECT_EQ(ok.chat().stop_reason(), v1::EOT);
}

TEST(ConstraintTest, InfoListsTheConstraintKinds) {
  auto engine = StartEngine(kContext);
  v1::Request request;
  request.mutable_info();
  const v1::InfoResponse info = Call(*engine, request).info();
  ASSERT_EQ(info.constraint_kinds_size(), 3);
  EXPECT_EQ(info.constraint_kinds(0), "json_schema");
  EXPECT_EQ(info.constraint_kinds(1), "gbnf");
  EXPECT_EQ(info.constraint_kinds(2), "any_json");
  EXPECT_EQ(info.max_json_schema_bytes(), kMaxJsonSchemaBytes);
  EXPECT_EQ(info.max_gbnf_bytes(), kMaxGbnfBytes);
}

// Request k of the batch: constrained (schema, grammar, any JSON; Chat and Generate; streamed; with
// logprobs; cached and uncached) and unconstrained ones.
v1::Request BatchRequest(int k, const std::string& session) {
  const uint64_t seed = 300 + k;
  switch (k) {
    case 0: {
      v1::Request r = ConstrainedChat(session, "describe a person", 60, Schema(kPersonSchema), seed);
      r.mutable_chat()->set_stream(true);
      return r;
    }
    case 1:
      return ConstrainedChat(session, "any json please", 50, AnyJson(), seed);
    case 2: {
      v1::Request r = GenerateRequest(session, {7, 8, 9, 10}, 40);
      r.mutable_generate()->mutable_sampling()->set_temperature(1.0f);
      r.mutable_generate()->mutable_sampling()->set_seed(seed);
      *r.mutable_generate()->mutable_constraint() = Gbnf("root ::= (\"ab\" | [0-9]+ \" \")+ \"!\"\n");
      r.mutable_generate()->set_want_logprobs(true);
      r.mutable_generate()->set_top_logprobs(3);
      r.mutable_generate()->set_stream(true);
      return r;
    }
    case 3: {
      v1::Request r = ConstrainedChat(session, "uncached", 40, Schema(kPersonSchema), seed);
      r.mutable_chat()->set_use_kv_cache(false);
      return r;
    }
    case 4: {
      v1::Request r = GenerateRequest(session, {11, 12}, 30);
      r.mutable_generate()->mutable_sampling()->set_temperature(0.9f);
      r.mutable_generate()->mutable_sampling()->set_seed(seed);
      r.mutable_generate()->set_want_logprobs(true);
      return r;  // unconstrained
    }
    case 5: {
      v1::Request r = ChatRequest(session, "free text", 30, /*use_kv_cache=*/true, /*stream=*/true);
      r.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      r.mutable_chat()->mutable_sampling()->set_seed(seed);
      return r;  // unconstrained
    }
    case 6: {
      v1::Request r = GenerateRequest(session, {20, 21, 22}, 40);
      *r.mutable_generate()->mutable_constraint() = AnyJson();
      r.mutable_generate()->set_use_kv_cache(false);
      r.mutable_generate()->mutable_sampling()->set_temperature(1.0f);
      r.mutable_generate()->mutable_sampling()->set_seed(seed);
      r.mutable_generate()->set_want_logprobs(true);
      return r;
    }
    default:
      return ConstrainedChat(session, "yes or no", 20, Gbnf("root ::= (\"yes\" | \"no\") \".\"?\n"), seed);
  }
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<int32_t> streamed_ids;
  std::string streamed_text;
  std::string text;
  v1::StopReason stop = v1::STOP_REASON_UNSPECIFIED;
  int64_t session_length = 0;
  bool operator==(const Outcome&) const = default;
};

Outcome OutcomeOf(const v1::Response& response, const std::vector<v1::Response>& events) {
  Outcome o;
  if (response.has_chat()) {
    o.ids.assign(response.chat().reply_ids().begin(), response.chat().reply_ids().end());
    o.text = response.chat().reply();
    o.stop = response.chat().stop_reason();
    o.session_length = response.chat().session_length();
  } else if (response.has_generate()) {
    o.ids.assign(response.generate().new_ids().begin(), response.generate().new_ids().end());
    o.stop = response.generate().stop_reason();
    o.session_length = response.generate().session_length();
    for (const v1::StepInfo& step : response.generate().steps()) {
      o.logprobs.push_back(step.logprob());
      for (const v1::TokenAlternative& alt : step.top()) o.logprobs.push_back(alt.logprob());
    }
  } else {
    ADD_FAILURE() << response.DebugString();
  }
  for (const v1::Response& e : events) {
    o.streamed_ids.push_back(e.token().id());
    o.streamed_text += e.token().text();
  }
  return o;
}

TEST(ConstraintTest, ConstrainedRequestsAreBitwiseBatchInvariant) {
  EngineOptions options;
  options.prefill_chunk = 8;
  auto engine = StartEngine(kContext, options);
  constexpr int kRequests = 8;
  std::vector<Outcome> solo;
  for (int k = 0; k < kRequests; ++k) {
    auto sink = SubmitAsync(*engine, BatchRequest(k, CreateSession(*engine)));
    const v1::Response response = sink->Wait();  // before events(): all of them are in by then
    solo.push_back(OutcomeOf(response, sink->events()));
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> sessions;
    for (int k = 0; k < kRequests; ++k) sessions.push_back(CreateSession(*engine));
    auto gate = std::make_shared<GateSink>();
    v1::Request gate_request = GenerateRequest(CreateSession(*engine), {3, 4}, 2);
    gate_request.mutable_generate()->set_stream(true);
    SubmitAsync(*engine, gate_request, kUid, nullptr, gate);
    gate->WaitEntered();
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    // Round 1: in the reverse order, so every request sits in another row of the batch.
    for (int i = 0; i < kRequests; ++i) {
      const int k = round == 0 ? i : kRequests - 1 - i;
      sinks.push_back(SubmitAsync(*engine, BatchRequest(k, sessions[k])));
    }
    gate->Open();
    for (int i = 0; i < kRequests; ++i) {
      const int k = round == 0 ? i : kRequests - 1 - i;
      const v1::Response response = sinks[i]->Wait();
      const Outcome together = OutcomeOf(response, sinks[i]->events());
      EXPECT_EQ(together.ids, solo[k].ids) << "request " << k << " round " << round;
      EXPECT_EQ(together.logprobs, solo[k].logprobs) << "request " << k << " round " << round;
      EXPECT_TRUE(together == solo[k]) << "request " << k << " round " << round;
    }
  }
  v1::Request stats;
  stats.mutable_stats();
  EXPECT_GT(Call(*engine, stats).stats().mean_batch_size(), 1.5) << "the requests shared decode steps";
  // The constrained replies are what their grammars allow, and a stream spells out its reply.
  for (int k : {0, 1, 3, 7}) {
    if (solo[k].stop != v1::EOT) continue;
    std::shared_ptr<const grammar::CompiledGrammar> g = *CompileConstraint(true, BatchRequest(k, "").chat().constraint());
    grammar::Matcher m(g);
    EXPECT_TRUE(m.AcceptBytes(solo[k].text).ok() && m.IsComplete()) << k << ": " << solo[k].text;
  }
  EXPECT_EQ(solo[0].streamed_text, solo[0].text);
  EXPECT_FALSE(solo[0].streamed_ids.empty());
}

TEST(ConstraintTest, CancelledConstrainedTurnLeavesTheSessionAsItWas) {
  auto engine = StartEngine(kContext);
  const std::string session = CreateSession(*engine);
  ASSERT_TRUE(Call(*engine, ChatRequest(session, "first turn", 4)).has_chat());
  const v1::SessionInfo before = SessionOf(*engine, session);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  auto sink = std::make_shared<RecordingSink>();
  sink->on_event = [&, n = 0](const v1::Response&) mutable {
    if (++n == 3) cancel->store(true);
    return true;
  };
  v1::Request r = ConstrainedChat(session, "a long list", 200, Gbnf("root ::= \"[\" [a-z]{150} \"]\"\n"), 9);
  r.mutable_chat()->set_stream(true);
  SubmitAsync(*engine, r, kUid, cancel, sink);
  EXPECT_EQ(ErrorOf(sink->Wait()), v1::CANCELLED);
  const v1::SessionInfo after = SessionOf(*engine, session);
  EXPECT_EQ(after.length(), before.length());
  EXPECT_EQ(after.turns(), before.turns());
  // The next turn starts a new matcher: a fresh output of its own grammar.
  const v1::Response next = Call(*engine, ConstrainedChat(session, "again", 30, Gbnf("root ::= \"ok\"\n"), 1));
  ASSERT_TRUE(next.has_chat()) << next.DebugString();
  EXPECT_EQ(next.chat().reply(), "ok");
  EXPECT_EQ(next.chat().stop_reason(), v1::EOT);
}

// Stop ids (at most kMaxStopIds) and banned ids (at most the vocabulary size, repeats counted):
// requests at the bounds are accepted and run -- with a constraint, the forced end takes the first
// stop id that is not banned, and no banned id is ever sampled -- and one id past a bound is refused
// with the limit named, before any token and with the session unchanged.
TEST(ConstraintTest, StopAndBannedIdListsAreBoundedAndRunAtTheBound) {
  auto engine = StartEngine(kContext);
  const std::string session = CreateSession(*engine);
  const auto model = LoadTinyModel(kContext);
  const int32_t vocab = static_cast<int32_t>(model->config.vocab_size);
  const text::SpecialTokens special = model->special;
  const std::vector<int32_t> others = {special.usr, special.sys, special.asst};
  const v1::Constraint yes_no = Gbnf("root ::= \"yes\" | \"no\"\n");
  // 64 stop ids, banned usr first, then eot, then the other specials, repeated.
  std::vector<int32_t> stops = {special.usr, special.eot};
  while (stops.size() < kMaxStopIds) stops.push_back(others[stops.size() % others.size()]);
  // V banned ids: the three non-stop specials, repeated (the distinct list is small, the wire list is
  // at its bound).
  std::vector<int32_t> banned_specials;
  while (banned_specials.size() < static_cast<size_t>(vocab)) banned_specials.push_back(others[banned_specials.size() % 3]);

  // Generate with a constraint at both bounds: runs, ends by the forced stop on eot.
  v1::Request generate = GenerateRequest(session, {5, 6}, 20);
  *generate.mutable_generate()->mutable_constraint() = yes_no;
  generate.mutable_generate()->mutable_stop_ids()->Add(stops.begin(), stops.end());
  generate.mutable_generate()->mutable_sampling()->mutable_banned_ids()->Add(banned_specials.begin(), banned_specials.end());
  v1::Response response = Call(*engine, generate);
  ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 400);
  EXPECT_EQ(response.generate().stop_reason(), v1::EOT);
  ASSERT_FALSE(response.generate().new_ids().empty());
  EXPECT_EQ(response.generate().new_ids(response.generate().new_ids_size() - 1), special.eot);

  // Chat with a constraint and V banned ids.
  v1::Request chat = ConstrainedChat(session, "go", 20, yes_no, 7);
  chat.mutable_chat()->mutable_sampling()->mutable_banned_ids()->Add(banned_specials.begin(), banned_specials.end());
  response = Call(*engine, chat);
  ASSERT_TRUE(response.has_chat()) << response.DebugString().substr(0, 400);
  EXPECT_TRUE(response.chat().reply() == "yes" || response.chat().reply() == "no") << response.chat().reply();
  EXPECT_EQ(response.chat().stop_reason(), v1::EOT);

  // Unconstrained, V banned ids, nearly all distinct: only the few unbanned ids are sampled.
  const std::vector<int32_t> allowed = {special.eot, 20, 21, 22, 23, 24};
  std::vector<int32_t> banned_most;
  for (int32_t id = 0; id < vocab; ++id) {
    if (std::find(allowed.begin(), allowed.end(), id) == allowed.end()) banned_most.push_back(id);
  }
  while (banned_most.size() < static_cast<size_t>(vocab)) banned_most.push_back(special.usr);
  v1::Request free = GenerateRequest(session, {7}, 12);
  free.mutable_generate()->mutable_sampling()->set_temperature(1.0f);
  free.mutable_generate()->mutable_sampling()->set_seed(3);
  free.mutable_generate()->mutable_sampling()->mutable_banned_ids()->Add(banned_most.begin(), banned_most.end());
  response = Call(*engine, free);
  ASSERT_TRUE(response.has_generate()) << response.DebugString().substr(0, 400);
  ASSERT_FALSE(response.generate().new_ids().empty());
  for (int32_t id : response.generate().new_ids()) {
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << id;
  }

  // One past a bound: refused, naming the limit.
  const std::string banned_limit = fmt::format("the limit is the vocabulary size, {})", vocab);
  v1::Request long_banned = generate;
  long_banned.mutable_generate()->mutable_sampling()->mutable_banned_ids()->Add(special.usr);
  ExpectRefused(*engine, session, long_banned, v1::INVALID_ARGUMENT,
                {fmt::format("sampling.banned_ids: {} ids", vocab + 1), banned_limit});
  v1::Request long_banned_chat = chat;
  long_banned_chat.mutable_chat()->mutable_sampling()->add_banned_ids(special.usr);
  ExpectRefused(*engine, session, long_banned_chat, v1::INVALID_ARGUMENT,
                {fmt::format("sampling.banned_ids: {} ids", vocab + 1), banned_limit});
  v1::Request hostile = GenerateRequest(session, {5}, 20);
  for (int i = 0; i < 200000; ++i) hostile.mutable_generate()->mutable_sampling()->add_banned_ids(i % vocab);
  ExpectRefused(*engine, session, hostile, v1::INVALID_ARGUMENT, {"sampling.banned_ids: 200000 ids", banned_limit});
  v1::Request long_stops = generate;
  long_stops.mutable_generate()->add_stop_ids(special.eot);
  ExpectRefused(*engine, session, long_stops, v1::INVALID_ARGUMENT,
                {fmt::format("stop_ids: {} ids (the limit is {})", kMaxStopIds + 1, kMaxStopIds)});
  v1::Request long_stops_free = GenerateRequest(session, {5}, 20);  // no constraint: the same bound
  for (size_t i = 0; i <= kMaxStopIds; ++i) long_stops_free.mutable_generate()->add_stop_ids(special.eot);
  ExpectRefused(*engine, session, long_stops_free, v1::INVALID_ARGUMENT, {"stop_ids: 65 ids (the limit is 64)"});
}

// A compile that has started is stopped by its request's cancel flag (the compile worker passes it
// as `cancelled`): the compilers poll it while they run, not only before and after.
TEST(ConstraintTest, ACompileInProgressStopsWhenItsRequestIsCancelled) {
  std::string gbnf = "root ::= (item0";
  for (int i = 1; i < 400; ++i) gbnf += fmt::format(" | item{}", i);
  gbnf += ")*\n";
  for (int i = 0; i < 400; ++i) gbnf += fmt::format("item{} ::= \"k{}\" [a-z]{{20}} | \"q{}\" [0-9]+\n", i, i, i);
  v1::Constraint constraint;
  constraint.set_gbnf(gbnf);
  // The flag is looked at before the compile (call 1); it turns true at the first poll during it
  // (call 2) and only there, so a compile that polled nothing would succeed.
  int calls = 0;
  auto compiled = CompileConstraint(true, constraint, [&calls] { return ++calls == 2; });
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), common::StatusCode::kCancelled) << compiled.status().ToString();
  EXPECT_EQ(compiled.status().message(), "the request was cancelled");
  EXPECT_EQ(calls, 2);
  // Never cancelled: it compiles, and the flag was polled while it did.
  calls = 0;
  auto whole = CompileConstraint(true, constraint, [&calls] { ++calls; return false; });
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_GT(calls, 2);
}

}  // namespace constraint_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
