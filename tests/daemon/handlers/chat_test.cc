// Chat through the engine: prefix reuse across turns, cached vs uncached, streaming, cancellation
// and atomic turns, forks, the context-limit policy and validation.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/text/generic_tool_format.h"

#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace chat_test {  // this file's own names: the suite compiles as one unity unit

using Ids = std::vector<int32_t>;

Ids ToIds(const google::protobuf::RepeatedField<int32_t>& field) { return Ids(field.begin(), field.end()); }

struct SessionView {
  Ids tokens;
  int64_t cached = 0;
  int32_t turns = 0;
};

SessionView View(Service& engine, const std::string& id) {
  v1::Response response = Call(engine, GetRequest(id));
  EXPECT_TRUE(response.has_get_session()) << response.DebugString();
  return {ToIds(response.get_session().token_ids()), response.get_session().session().cached_tokens(),
          response.get_session().session().turns()};
}

class ChatTest : public ::testing::Test {
 protected:
  void Start(int64_t context, EngineOptions options = {}) {
    engine_ = StartEngine(context, std::move(options));
    model_ = LoadTinyModel(context);
    special_ = model_->special;
  }
  std::string Create(const std::string& system) {
    v1::Response response = Call(*engine_, CreateRequest(&system));
    EXPECT_TRUE(response.has_create_session()) << response.DebugString();
    return response.create_session().session_id();
  }
  // [role] + Encode(text) + [eot], written here from the template's definition.
  Ids Message(int32_t role, const std::string& text) const {
    Ids ids = {role};
    for (int32_t id : niels::testing::EncodeText(*model_->tokenizer, text)) ids.push_back(id);
    ids.push_back(special_.eot);
    return ids;
  }
  // A user turn as appended to the history: [usr] text [eot] [asst].
  Ids UserTurn(const std::string& text) const {
    Ids ids = Message(special_.usr, text);
    ids.push_back(special_.asst);
    return ids;
  }
  v1::Response Chat(const std::string& id, const std::string& text, int max_new_tokens, bool use_kv_cache = true) {
    return Call(*engine_, ChatRequest(id, text, max_new_tokens, use_kv_cache));
  }

  std::unique_ptr<Service> engine_;
  std::unique_ptr<loaders::Model> model_;
  text::SpecialTokens special_;
};

const std::vector<std::string> kUserTexts = {"hello there", "what is the weather like today?", "tell me more",
                                             "why is that so", "thanks, goodbye"};

TEST_F(ChatTest, FollowUpTurnsPrefillOnlyTheirNewTokens) {
  Start(256);
  const std::string system = "you are a small test bot";
  const std::string id = Create(system);
  EXPECT_EQ(View(*engine_, id).tokens, Message(special_.sys, system));
  v1::StopReason previous_stop = v1::STOP_REASON_UNSPECIFIED;
  for (size_t turn = 0; turn < kUserTexts.size(); ++turn) {
    const SessionView before = View(*engine_, id);
    const v1::Response response = Chat(id, kUserTexts[turn], 6);
    ASSERT_TRUE(response.has_chat()) << response.DebugString();
    const v1::ChatResponse& chat = response.chat();
    const Ids user = UserTurn(kUserTexts[turn]);
    const Ids reply = ToIds(chat.reply_ids());
    const bool ended_on_eot = chat.stop_reason() == v1::EOT;
    ASSERT_TRUE(ended_on_eot || chat.stop_reason() == v1::MAX_TOKENS) << chat.DebugString();

    // The history reads: before + [usr] text [eot] [asst] reply [eot].
    Ids expected = before.tokens;
    expected.insert(expected.end(), user.begin(), user.end());
    expected.insert(expected.end(), reply.begin(), reply.end());
    expected.push_back(special_.eot);
    const SessionView after = View(*engine_, id);
    EXPECT_EQ(after.tokens, expected);
    EXPECT_EQ(chat.session_length(), static_cast<int64_t>(expected.size()));
    EXPECT_EQ(after.turns, static_cast<int32_t>(turn + 1));
    EXPECT_EQ(chat.truncated_turns(), 0);
    EXPECT_EQ(chat.reply(), model_->tokenizer->Decode(reply));
    // Not yet cached: the final eot, and after MAX_TOKENS also the last reply token.
    EXPECT_EQ(after.cached, after.tokens.size() - (ended_on_eot ? 1 : 2));

    // Only the tokens not in the cache are prefilled: the previous turn's uncached tail + this turn.
    const v1::GenerationStats& stats = chat.stats();
    const int64_t uncached_tail = static_cast<int64_t>(before.tokens.size()) - before.cached;
    if (turn == 0) {
      EXPECT_EQ(uncached_tail, 0);  // the system prompt was prefilled at creation
    } else {
      EXPECT_EQ(uncached_tail, previous_stop == v1::EOT ? 1 : 2);
    }
    EXPECT_EQ(stats.prompt_tokens(), static_cast<int64_t>(before.tokens.size() + user.size()));
    EXPECT_EQ(stats.reused_tokens(), before.cached);
    EXPECT_EQ(stats.prefilled_tokens(), uncached_tail + static_cast<int64_t>(user.size()));
    EXPECT_EQ(stats.generated_tokens(), static_cast<int64_t>(reply.size()) + (ended_on_eot ? 1 : 0));
    EXPECT_TRUE(stats.used_kv_cache());
    EXPECT_GE(stats.queue_ms(), 0.0);
    previous_stop = chat.stop_reason();
  }
}

TEST_F(ChatTest, UncachedPathGivesIdenticalGreedyReplies) {
  Start(256);
  const std::string system = "you are a small test bot";
  const std::string cached = Create(system);
  const std::string uncached = Create(system);
  const std::string mixed = Create(system);
  for (size_t turn = 0; turn < kUserTexts.size(); ++turn) {
    const v1::Response a = Chat(cached, kUserTexts[turn], 8);
    const v1::Response b = Chat(uncached, kUserTexts[turn], 8, /*use_kv_cache=*/false);
    const v1::Response c = Chat(mixed, kUserTexts[turn], 8, /*use_kv_cache=*/turn % 2 == 1);
    ASSERT_TRUE(a.has_chat() && b.has_chat() && c.has_chat()) << b.DebugString() << c.DebugString();
    EXPECT_EQ(ToIds(b.chat().reply_ids()), ToIds(a.chat().reply_ids())) << "turn " << turn;
    EXPECT_EQ(ToIds(c.chat().reply_ids()), ToIds(a.chat().reply_ids())) << "turn " << turn;
    EXPECT_FALSE(b.chat().stats().used_kv_cache());
    EXPECT_EQ(b.chat().stats().reused_tokens(), 0);
    EXPECT_EQ(View(*engine_, uncached).cached, 0);  // the uncached path drops the session's cache
  }
  EXPECT_EQ(View(*engine_, uncached).tokens, View(*engine_, cached).tokens);
}

TEST_F(ChatTest, StreamedEventsAddUpToTheReply) {
  Start(256);
  const std::string id = Create("be brief");
  v1::Request request = ChatRequest(id, "hello there", 12, true, /*stream=*/true);
  auto sink = SubmitAsync(*engine_, request);
  const v1::Response response = sink->Wait();
  ASSERT_TRUE(response.has_chat()) << response.DebugString();
  Ids sampled = ToIds(response.chat().reply_ids());
  if (response.chat().stop_reason() == v1::EOT) sampled.push_back(special_.eot);
  const std::vector<v1::Response> events = sink->events();
  ASSERT_EQ(events.size(), sampled.size());
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_TRUE(events[i].has_token());
    EXPECT_EQ(events[i].request_id(), response.request_id());
    EXPECT_EQ(events[i].token().id(), sampled[i]);
    EXPECT_EQ(events[i].token().index(), static_cast<int32_t>(i));
    text += events[i].token().text();
  }
  EXPECT_EQ(text, response.chat().reply());
}

TEST_F(ChatTest, SameSeedSameReply) {
  Start(256);
  const std::string a = Create("be brief");
  const std::string b = Create("be brief");
  v1::Request request = ChatRequest(a, "hello there", 10);
  request.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
  request.mutable_chat()->mutable_sampling()->set_seed(1234);
  const v1::Response first = Call(*engine_, request);
  request.mutable_chat()->set_session_id(b);
  const v1::Response second = Call(*engine_, request);
  ASSERT_TRUE(first.has_chat() && second.has_chat());
  EXPECT_EQ(ToIds(first.chat().reply_ids()), ToIds(second.chat().reply_ids()));
}

// Cancels the request after `after` events, by setting its flag or by refusing the event.
struct CancelAfter {
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<RecordingSink> sink = std::make_shared<RecordingSink>();
  CancelAfter(size_t after, bool refuse) {
    auto count = std::make_shared<size_t>(0);
    sink->on_event = [this, count, after, refuse](const v1::Response&) {
      if (++*count < after) return true;
      if (refuse) return false;
      cancel->store(true);
      return true;
    };
  }
};

TEST_F(ChatTest, CancelMidStreamRestoresTheSession) {
  Start(256);
  for (bool refuse : {false, true}) {
    const std::string id = Create("be brief");
    ASSERT_TRUE(Chat(id, "hello there", 5).has_chat());
    v1::Request fork_request;
    fork_request.mutable_fork_session()->set_session_id(id);
    const std::string twin = Call(*engine_, fork_request).fork_session().session_id();
    const SessionView before = View(*engine_, id);

    CancelAfter canceller(2, refuse);
    v1::Request request = ChatRequest(id, "tell me more", 30, true, /*stream=*/true);
    request.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);  // never ends early
    SubmitAsync(*engine_, request, kUid, canceller.cancel, canceller.sink);
    EXPECT_EQ(ErrorOf(canceller.sink->Wait()), v1::CANCELLED) << (refuse ? "refused event" : "cancel flag");
    EXPECT_EQ(canceller.sink->events().size(), 2u);  // the flag is read before the next forward
    EXPECT_EQ(canceller.sink->finals(), 1);

    const SessionView after = View(*engine_, id);
    EXPECT_EQ(after.tokens, before.tokens);
    EXPECT_EQ(after.cached, before.cached);
    EXPECT_EQ(after.turns, before.turns);
    // The restored session behaves exactly like its untouched twin.
    const v1::Response next = Chat(id, "tell me more", 6);
    const v1::Response expected = Chat(twin, "tell me more", 6);
    ASSERT_TRUE(next.has_chat() && expected.has_chat());
    EXPECT_EQ(ToIds(next.chat().reply_ids()), ToIds(expected.chat().reply_ids()));
    EXPECT_EQ(next.chat().stats().prefilled_tokens(), expected.chat().stats().prefilled_tokens());
  }
}

// A Cancel with keep_output (the request's stop flag) ends a streaming turn at its next token with
// STOPPED and keeps what it generated: the reply, the session and the next turn are exactly those
// of a twin session whose same turn ended there by max_new_tokens. A stop set before the request
// runs still processes the prompt and keeps it.
TEST_F(ChatTest, StopKeepsWhatWasGenerated) {
  Start(256);
  const std::string id = Create("be brief");
  ASSERT_TRUE(Chat(id, "hello there", 5).has_chat());
  v1::Request fork_request;
  fork_request.mutable_fork_session()->set_session_id(id);
  const std::string twin = Call(*engine_, fork_request).fork_session().session_id();

  auto stop = std::make_shared<std::atomic<bool>>(false);
  auto sink = std::make_shared<RecordingSink>();
  auto seen = std::make_shared<size_t>(0);
  sink->on_event = [stop, seen](const v1::Response&) {
    if (++*seen == 3) stop->store(true);
    return true;
  };
  v1::Request request = ChatRequest(id, "tell me more", 30, true, /*stream=*/true);
  request.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);  // never ends early
  request.set_request_id(9001);
  server::Job job(server::Caller{kUid}, request, std::make_shared<std::atomic<bool>>(false), sink);
  job.set_stop(stop);
  engine_->Submit(std::move(job));
  const v1::Response stopped = sink->Wait();
  ASSERT_TRUE(stopped.has_chat()) << stopped.DebugString();
  EXPECT_EQ(stopped.chat().stop_reason(), v1::STOPPED);
  EXPECT_EQ(stopped.chat().reply_ids_size(), 3) << "the flag is read before the next decode step";

  v1::Request cut = ChatRequest(twin, "tell me more", 3, true);
  cut.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);
  const v1::Response expected = Call(*engine_, cut);
  ASSERT_TRUE(expected.has_chat());
  EXPECT_EQ(expected.chat().stop_reason(), v1::MAX_TOKENS);
  EXPECT_EQ(ToIds(stopped.chat().reply_ids()), ToIds(expected.chat().reply_ids()));
  EXPECT_EQ(stopped.chat().reply(), expected.chat().reply());
  EXPECT_EQ(View(*engine_, id).tokens, View(*engine_, twin).tokens);
  const v1::Response next = Chat(id, "and then?", 6);
  const v1::Response next_twin = Chat(twin, "and then?", 6);
  ASSERT_TRUE(next.has_chat() && next_twin.has_chat());
  EXPECT_EQ(ToIds(next.chat().reply_ids()), ToIds(next_twin.chat().reply_ids()));

  // Stopped before it runs: the prompt is processed and kept, with the one id its prefill sampled.
  auto early = std::make_shared<std::atomic<bool>>(true);
  auto early_sink = std::make_shared<RecordingSink>();
  v1::Request again = ChatRequest(id, "one more", 10, true);
  again.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);
  again.set_request_id(9002);
  server::Job early_job(server::Caller{kUid}, again, std::make_shared<std::atomic<bool>>(false), early_sink);
  early_job.set_stop(early);
  engine_->Submit(std::move(early_job));
  const v1::Response early_stopped = early_sink->Wait();
  ASSERT_TRUE(early_stopped.has_chat()) << early_stopped.DebugString();
  EXPECT_EQ(early_stopped.chat().stop_reason(), v1::STOPPED);
  EXPECT_EQ(early_stopped.chat().reply_ids_size(), 1);
  EXPECT_GT(early_stopped.chat().session_length(), next.chat().session_length());
}

TEST_F(ChatTest, ForkIsIndependentOfItsParent) {
  Start(256);
  const std::string parent = Create("be brief");
  ASSERT_TRUE(Chat(parent, "hello there", 5).has_chat());
  v1::Request fork_request;
  fork_request.mutable_fork_session()->set_session_id(parent);
  const v1::Response forked = Call(*engine_, fork_request);
  ASSERT_TRUE(forked.has_fork_session()) << forked.DebugString();
  const std::string fork = forked.fork_session().session_id();
  EXPECT_NE(fork, parent);
  const SessionView parent_before = View(*engine_, parent);
  EXPECT_EQ(forked.fork_session().length(), static_cast<int64_t>(parent_before.tokens.size()));
  EXPECT_EQ(View(*engine_, fork).tokens, parent_before.tokens);
  EXPECT_EQ(View(*engine_, fork).cached, parent_before.cached);

  const v1::Response on_fork = Chat(fork, "what is the weather like today?", 6);
  ASSERT_TRUE(on_fork.has_chat());
  const SessionView parent_after = View(*engine_, parent);
  EXPECT_EQ(parent_after.tokens, parent_before.tokens);
  EXPECT_EQ(parent_after.cached, parent_before.cached);
  // The parent, given the same turn, answers as the fork did, from its own cache.
  const v1::Response on_parent = Chat(parent, "what is the weather like today?", 6);
  ASSERT_TRUE(on_parent.has_chat());
  EXPECT_EQ(ToIds(on_parent.chat().reply_ids()), ToIds(on_fork.chat().reply_ids()));
  // Its own cache at least, and the whole blocks the fork's turn registered for the same tokens.
  EXPECT_GE(on_parent.chat().stats().reused_tokens(), on_fork.chat().stats().reused_tokens());
  EXPECT_EQ(on_parent.chat().stats().reused_tokens(),
            std::max(on_fork.chat().stats().reused_tokens(),
                     (on_fork.chat().stats().prompt_tokens() - 1) / 16 * 16));
  v1::Request remove;
  remove.mutable_delete_session()->set_session_id(parent);
  ASSERT_TRUE(Call(*engine_, remove).has_delete_session());
  EXPECT_TRUE(Chat(fork, "thanks, goodbye", 3).has_chat());
}

TEST_F(ChatTest, ContextLimitDropsOldestTurnsAndKeepsTheSystemPrompt) {
  Start(64);  // reply room R = min(max_new_tokens, T/4) = 8
  const std::string system = "be brief";
  const Ids system_ids = Message(special_.sys, system);
  const std::string id = Create(system);
  std::vector<Ids> turns;  // each completed turn's tokens, oldest first
  bool truncated = false;
  for (int i = 0; i < 12 && !truncated; ++i) {
    const SessionView before = View(*engine_, id);
    const std::string text = kUserTexts[i % kUserTexts.size()];
    v1::Request request = ChatRequest(id, text, 8);
    request.mutable_chat()->mutable_sampling()->add_banned_ids(special_.eot);  // replies of exactly 8
    const v1::Response response = Call(*engine_, request);
    ASSERT_TRUE(response.has_chat()) << response.DebugString();
    const v1::ChatResponse& chat = response.chat();
    const int dropped = chat.truncated_turns();
    Ids turn = UserTurn(text);
    const Ids reply = ToIds(chat.reply_ids());
    ASSERT_EQ(reply.size(), 8u);
    turn.insert(turn.end(), reply.begin(), reply.end());
    turn.push_back(special_.eot);
    // Dropping happens exactly when the turn plus the reply room would not fit.
    const int64_t needed = static_cast<int64_t>(before.tokens.size() + UserTurn(text).size()) + 8;
    EXPECT_EQ(dropped > 0, needed > 64) << "turn " << i;
    turns.erase(turns.begin(), turns.begin() + dropped);
    turns.push_back(turn);
    Ids expected = system_ids;
    for (const Ids& kept : turns) expected.insert(expected.end(), kept.begin(), kept.end());
    const SessionView after = View(*engine_, id);
    EXPECT_EQ(after.tokens, expected) << "turn " << i;
    EXPECT_EQ(after.turns, static_cast<int32_t>(turns.size()));
    EXPECT_LE(chat.stats().prompt_tokens() + 8, 64);
    if (dropped > 0) {
      truncated = true;
      // The system prompt's cached keys/values were kept; everything after it was re-prefilled.
      EXPECT_EQ(chat.stats().reused_tokens(), static_cast<int64_t>(system_ids.size()));
      EXPECT_EQ(chat.stats().prefilled_tokens(), chat.stats().prompt_tokens() - chat.stats().reused_tokens());
    }
  }
  EXPECT_TRUE(truncated);
}

TEST_F(ChatTest, TurnThatCannotFitIsRejectedAndTheSessionUnchanged) {
  Start(64);
  const std::string id = Create("be brief");
  ASSERT_TRUE(Chat(id, "hello there", 4).has_chat());
  const SessionView before = View(*engine_, id);
  std::string long_text;
  while (UserTurn(long_text).size() + before.tokens.size() < 80) long_text += "tell me more about the weather ";
  ASSERT_GE(UserTurn(long_text).size() + Message(special_.sys, "be brief").size(), 64u);
  EXPECT_EQ(ErrorOf(Chat(id, long_text, 4)), v1::INVALID_ARGUMENT);
  const SessionView after = View(*engine_, id);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.cached, before.cached);
  EXPECT_EQ(after.turns, before.turns);
}

TEST_F(ChatTest, InvalidRequestsAreRejected) {
  Start(64);
  const std::string id = Create("be brief");
  auto with = [&](auto change) {
    v1::Request request = ChatRequest(id, "hello there", 4);
    change(*request.mutable_chat());
    return ErrorOf(Call(*engine_, request));
  };
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.set_user_text(""); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.set_max_new_tokens(0); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.set_max_new_tokens(-3); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.set_max_new_tokens(1 << 30); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.mutable_sampling()->set_temperature(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.mutable_sampling()->set_top_k(-1); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.mutable_sampling()->set_top_p(1.5f); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.mutable_sampling()->set_repetition_penalty(0); }),
            v1::INVALID_ARGUMENT);
  EXPECT_EQ(with([](v1::ChatRequest& c) { c.mutable_sampling()->add_banned_ids(1 << 20); }), v1::INVALID_ARGUMENT);
  EXPECT_EQ(View(*engine_, id).turns, 0);
}

TEST_F(ChatTest, RoleTokensAreBannedUnlessAllowed) {
  Start(256);
  const std::string id = Create("be brief");
  v1::Request request = ChatRequest(id, "hello there", 40);
  request.mutable_chat()->mutable_sampling()->set_temperature(5.0f);  // near-uniform: all ids likely
  request.mutable_chat()->mutable_sampling()->set_top_k(0);
  for (int round = 0; round < 3; ++round) {
    request.mutable_chat()->mutable_sampling()->set_seed(round);
    const v1::Response response = Call(*engine_, request);
    ASSERT_TRUE(response.has_chat());
    for (int32_t token : response.chat().reply_ids()) {
      EXPECT_NE(token, special_.sys);
      EXPECT_NE(token, special_.usr);
      EXPECT_NE(token, special_.asst);
    }
  }
}

// GetSession reads the conversation back as messages: the system prompt, then each turn's user
// text and reply, as the turns' tokens hold them (a reply cut by max_new_tokens included).
TEST_F(ChatTest, GetSessionReadsTheConversationBackAsMessages) {
  Start(256);
  const std::string id = Create("you are terse.");
  std::vector<std::string> replies;
  for (int i = 0; i < 2; ++i) {
    const v1::Response reply = Chat(id, kUserTexts[i], 6);
    ASSERT_TRUE(reply.has_chat()) << reply.DebugString();
    replies.push_back(reply.chat().reply());
  }
  const v1::Response got = Call(*engine_, GetRequest(id));
  ASSERT_TRUE(got.has_get_session()) << got.DebugString();
  const auto& messages = got.get_session().messages();
  ASSERT_EQ(messages.size(), 5) << got.DebugString();
  EXPECT_EQ(messages[0].role(), "system");
  EXPECT_EQ(messages[0].content(), "you are terse.");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(messages[1 + 2 * i].role(), "user");
    EXPECT_EQ(messages[1 + 2 * i].content(), kUserTexts[i]);
    EXPECT_EQ(messages[2 + 2 * i].role(), "assistant");
    EXPECT_EQ(messages[2 + 2 * i].content(), replies[i]);
  }
  // A session Generate filled has no conversation.
  const std::string raw = Call(*engine_, CreateRequest()).create_session().session_id();
  ASSERT_TRUE(Call(*engine_, GenerateRequest(raw, {5, 6, 7}, 2)).has_generate());
  EXPECT_EQ(Call(*engine_, GetRequest(raw)).get_session().messages_size(), 0);
}

v1::Request RewindRequest(const std::string& session, int keep) {
  v1::Request request;
  request.mutable_rewind_session()->set_session_id(session);
  request.mutable_rewind_session()->set_keep_messages(keep);
  return request;
}

// RewindSession drops the turns after the kept messages: the history is then exactly what it was
// after those turns (tokens and cache), and the next turn regenerates as it did then, prefilling
// only itself. Odd or too large counts are refused and change nothing.
TEST_F(ChatTest, RewindDropsTheLaterTurnsAndTheNextTurnContinuesFromThere) {
  Start(256);
  const std::string id = Create("you are terse.");
  std::vector<SessionView> after;
  std::vector<std::string> replies;
  for (int i = 0; i < 3; ++i) {
    const v1::Response reply = Chat(id, kUserTexts[i], 6);
    ASSERT_TRUE(reply.has_chat()) << reply.DebugString();
    replies.push_back(reply.chat().reply());
    after.push_back(View(*engine_, id));
  }
  const SessionView before = View(*engine_, id);
  for (int bad : {3, 8, -2}) {
    EXPECT_EQ(ErrorOf(Call(*engine_, RewindRequest(id, bad))), v1::INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(View(*engine_, id).tokens, before.tokens);

  const v1::Response rewound = Call(*engine_, RewindRequest(id, 2));  // keep the first turn
  ASSERT_TRUE(rewound.has_rewind_session()) << rewound.DebugString();
  EXPECT_EQ(rewound.rewind_session().messages(), 2);
  const SessionView kept = View(*engine_, id);
  EXPECT_EQ(kept.tokens, after[0].tokens);
  EXPECT_EQ(kept.turns, 1);
  EXPECT_LE(kept.cached, static_cast<int64_t>(kept.tokens.size()));
  EXPECT_EQ(rewound.rewind_session().length(), static_cast<int64_t>(after[0].tokens.size()));
  // Regenerate the second turn: the same greedy reply, only the new turn prefilled.
  const v1::Response again = Chat(id, kUserTexts[1], 6);
  ASSERT_TRUE(again.has_chat()) << again.DebugString();
  EXPECT_EQ(again.chat().reply(), replies[1]);
  EXPECT_EQ(View(*engine_, id).tokens, after[1].tokens);
  EXPECT_LE(again.chat().stats().prefilled_tokens(), static_cast<int64_t>(UserTurn(kUserTexts[1]).size()) + 1);
  // Back to the system prompt alone.
  ASSERT_TRUE(Call(*engine_, RewindRequest(id, 0)).has_rewind_session());
  EXPECT_EQ(View(*engine_, id).turns, 0);
  EXPECT_EQ(Call(*engine_, GetRequest(id)).get_session().messages_size(), 1);  // the system prompt
}

// The token-native format takes one user message per Chat as messages too (the same turn as
// user_text) and keep_messages in whole turns; append_only, assistant and tool messages and tools
// are INVALID_ARGUMENT there and change nothing.
Ids IdsOf(const google::protobuf::RepeatedField<int32_t>& ids) { return Ids(ids.begin(), ids.end()); }

TEST_F(ChatTest, MessagesOnTheTokenNativeFormat) {
  Start(256);
  const std::string by_text = Create("sys");
  const std::string by_message = Create("sys");
  const v1::Response text_reply = Chat(by_text, "hello there", 6);
  ASSERT_TRUE(text_reply.has_chat()) << text_reply.DebugString();
  v1::Request request = ChatRequest(by_message, "", 6);
  v1::ChatMessage& user = *request.mutable_chat()->add_messages();
  user.set_role("user");
  user.set_content("hello there");
  const v1::Response message_reply = Call(*engine_, request);
  ASSERT_TRUE(message_reply.has_chat()) << message_reply.DebugString();
  EXPECT_EQ(IdsOf(message_reply.chat().reply_ids()), IdsOf(text_reply.chat().reply_ids()));
  EXPECT_EQ(message_reply.chat().messages(), 2);
  EXPECT_EQ(IdsOf(Call(*engine_, GetRequest(by_message)).get_session().token_ids()),
            IdsOf(Call(*engine_, GetRequest(by_text)).get_session().token_ids()));

  // keep_messages 0 with the same message again: the same turn from the system prompt.
  request.mutable_chat()->set_keep_messages(0);
  const v1::Response again = Call(*engine_, request);
  ASSERT_TRUE(again.has_chat()) << again.DebugString();
  EXPECT_EQ(IdsOf(again.chat().reply_ids()), IdsOf(text_reply.chat().reply_ids()));
  EXPECT_EQ(again.chat().messages(), 2);

  const Ids before = IdsOf(Call(*engine_, GetRequest(by_message)).get_session().token_ids());
  std::vector<v1::Request> refused;
  {
    v1::Request append = request;
    append.mutable_chat()->clear_keep_messages();
    append.mutable_chat()->set_append_only(true);
    refused.push_back(append);
  }
  {
    v1::Request odd = request;
    odd.mutable_chat()->set_keep_messages(1);
    refused.push_back(odd);
  }
  {
    v1::Request two = request;
    two.mutable_chat()->clear_keep_messages();
    *two.mutable_chat()->add_messages() = user;
    refused.push_back(two);
  }
  {
    v1::Request tool = request;
    tool.mutable_chat()->clear_keep_messages();
    v1::ChatMessage& result = *tool.mutable_chat()->mutable_messages(0);
    result.set_role("tool");
    result.set_tool_call_id("call_1");
    refused.push_back(tool);
  }
  {
    v1::Request tools = request;
    tools.mutable_chat()->clear_keep_messages();
    tools.mutable_chat()->mutable_tools()->add_tools()->set_name("f");
    refused.push_back(tools);
  }
  for (const v1::Request& bad : refused) {
    const v1::Response response = Call(*engine_, bad);
    ASSERT_TRUE(response.has_error()) << bad.DebugString() << response.DebugString();
    EXPECT_EQ(response.error().code(), v1::INVALID_ARGUMENT) << response.error().message();
    EXPECT_EQ(IdsOf(Call(*engine_, GetRequest(by_message)).get_session().token_ids()), before);
  }
  v1::Request info;
  info.mutable_info();
  EXPECT_EQ(Call(*engine_, info).info().tool_call_format(), "generic_json");
}

// A niels_gpt session with tools keeps its conversation as messages (conversation mode,
// engine/chat_turn.h): the prompt is the token-native rendering of the generic tool format's
// rewrite ([sys] system + tool block [eot] [usr] question [eot] [asst]); a forced call comes back
// parsed and valid; its result, sent as a tool message, is rendered as a user message after the
// call and the turn reuses the cache up to there; GetSession reads the conversation back with its
// roles. Tools on a session that already holds token-native turns are refused.
TEST_F(ChatTest, ANielsGptSessionWithToolsKeepsItsConversationAsMessages) {
  Start(4096);
  const std::string system = "you are a small test bot";
  v1::Request create = CreateRequest(&system);
  v1::Tool& tool = *create.mutable_create_session()->mutable_tools()->add_tools();
  tool.set_name("get_weather");
  tool.set_description("The weather of a city");
  tool.set_parameters(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]})");
  const v1::Response created = Call(*engine_, create);
  ASSERT_TRUE(created.has_create_session()) << created.DebugString();
  const std::string id = created.create_session().session_id();
  const std::vector<text::ToolDefinition> tools = {{tool.name(), tool.description(), tool.parameters()}};

  v1::Request forced = ChatRequest(id, "weather in oslo?", 64);
  forced.mutable_chat()->mutable_tool_choice()->set_mode(v1::ToolChoice::NAMED);
  forced.mutable_chat()->mutable_tool_choice()->set_name("get_weather");
  const v1::Response called = Call(*engine_, forced);
  ASSERT_TRUE(called.has_chat()) << called.DebugString();
  ASSERT_EQ(called.chat().stop_reason(), v1::TOOL_CALLS) << called.chat().reply();
  ASSERT_EQ(called.chat().tool_calls_size(), 1);
  const v1::ToolCall& call = called.chat().tool_calls(0);
  EXPECT_EQ(call.name(), "get_weather");
  const nlohmann::json arguments = nlohmann::json::parse(call.arguments());
  ASSERT_TRUE(arguments.contains("city")) << call.arguments();
  EXPECT_LE(arguments["city"].get<std::string>().size(), 8u);

  const std::string described = *text::GenericToolConversation(system, {}, &tools).system_prompt;
  Ids prompt = Message(special_.sys, described);
  const Ids user = UserTurn("weather in oslo?");
  prompt.insert(prompt.end(), user.begin(), user.end());
  const v1::Response got = Call(*engine_, GetRequest(id));
  const Ids history = IdsOf(got.get_session().token_ids());
  ASSERT_GE(history.size(), prompt.size());
  EXPECT_EQ(Ids(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(prompt.size())), prompt);
  EXPECT_EQ(called.chat().stats().prompt_tokens(), static_cast<int64_t>(prompt.size()));

  v1::Request answer = ChatRequest(id, "", 4);
  v1::ChatMessage& result = *answer.mutable_chat()->add_messages();
  result.set_role("tool");
  result.set_content("cloudy");
  result.set_tool_call_id(call.id());
  const v1::Response answered = Call(*engine_, answer);
  ASSERT_TRUE(answered.has_chat()) << answered.DebugString();
  EXPECT_GE(answered.chat().stats().reused_tokens(), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(answered.chat().stats().reused_tokens() + answered.chat().stats().prefilled_tokens(),
            answered.chat().stats().prompt_tokens());
  const v1::GetSessionResponse after = Call(*engine_, GetRequest(id)).get_session();
  std::vector<std::string> roles;
  for (const v1::ChatMessage& message : after.messages()) roles.push_back(message.role());
  EXPECT_EQ(roles, (std::vector<std::string>{"system", "user", "assistant", "tool", "assistant"}));
  EXPECT_EQ(after.messages(0).content(), system);
  EXPECT_EQ(after.messages(2).tool_calls_size(), 1);

  // A session with token-native turns takes no tools.
  const std::string plain = Create(system);
  ASSERT_TRUE(Chat(plain, "hello there", 2).has_chat());
  v1::Request late = ChatRequest(plain, "and now?", 2);
  *late.mutable_chat()->mutable_tools()->add_tools() = tool;
  const v1::Response refused = Call(*engine_, late);
  ASSERT_TRUE(refused.has_error()) << refused.DebugString();
  EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message().find("tools"), std::string::npos) << refused.error().message();
}

TEST_F(ChatTest, ANativeConversationResentWholeBecomesItsTurns) {
  Start(256);
  const std::string id = Create("sys");
  const Ids start = IdsOf(Call(*engine_, GetRequest(id)).get_session().token_ids());
  v1::Request request = ChatRequest(id, "", 5);
  const std::vector<std::pair<std::string, std::string>> roles = {
      {"user", "hello there"}, {"assistant", "hi, what can I do"}, {"user", "tell me more"},
      {"assistant", "about what"}, {"user", "why is that so"}};
  for (const auto& [role, content] : roles) {
    v1::ChatMessage& message = *request.mutable_chat()->add_messages();
    message.set_role(role);
    message.set_content(content);
  }
  const v1::Response reply = Call(*engine_, request);
  ASSERT_TRUE(reply.has_chat()) << reply.DebugString();
  EXPECT_EQ(reply.chat().messages(), 6);
  // The history: the system prompt, each earlier exchange as a closed turn, then the new turn.
  Ids expected = start;
  for (size_t i = 0; i + 1 < roles.size(); i += 2) {
    const Ids asked = UserTurn(roles[i].second);
    expected.insert(expected.end(), asked.begin(), asked.end());
    const Ids answer = niels::testing::EncodeText(*model_->tokenizer, roles[i + 1].second);
    expected.insert(expected.end(), answer.begin(), answer.end());
    expected.push_back(special_.eot);
  }
  const Ids last = UserTurn(roles.back().second);
  expected.insert(expected.end(), last.begin(), last.end());
  const v1::Response session = Call(*engine_, GetRequest(id));
  const Ids history = IdsOf(session.get_session().token_ids());
  ASSERT_GE(history.size(), expected.size());
  EXPECT_EQ(Ids(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(expected.size())), expected);
  ASSERT_EQ(session.get_session().messages_size(), 7);  // the system prompt and six messages
  EXPECT_EQ(session.get_session().messages(3).content(), "tell me more");
  EXPECT_EQ(session.get_session().messages(4).role(), "assistant");
  EXPECT_EQ(session.get_session().messages(4).content(), "about what");
  // Whole turns: keep_messages 2 cuts back to the first exchange.
  v1::Request cut = ChatRequest(id, "tell me more", 5);
  cut.mutable_chat()->set_keep_messages(2);
  const v1::Response after_cut = Call(*engine_, cut);
  ASSERT_TRUE(after_cut.has_chat()) << after_cut.DebugString();
  EXPECT_EQ(after_cut.chat().messages(), 4);
  // Out of turn (two user messages, an assistant message last): refused, the session unchanged.
  const Ids before = IdsOf(Call(*engine_, GetRequest(id)).get_session().token_ids());
  for (const std::vector<std::string>& order :
       std::vector<std::vector<std::string>>{{"user", "user", "user"}, {"user", "assistant"}, {"assistant", "user", "user"}}) {
    v1::Request bad = ChatRequest(id, "", 5);
    for (const std::string& role : order) {
      v1::ChatMessage& message = *bad.mutable_chat()->add_messages();
      message.set_role(role);
      message.set_content("x");
    }
    const v1::Response refused = Call(*engine_, bad);
    ASSERT_TRUE(refused.has_error()) << refused.DebugString();
    EXPECT_EQ(refused.error().code(), v1::INVALID_ARGUMENT);
  }
  EXPECT_EQ(IdsOf(Call(*engine_, GetRequest(id)).get_session().token_ids()), before);
}

}  // namespace chat_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
