// The Engine on its own, with typed Work and no wire protocol: what the handlers rely on (work.h,
// engine.h): every Work answered once, refusals, per-session order, quick work between generation
// steps, and a raw generation through StartGenerateTurn equal to the full forward's argmax.
#include "daemon/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/engine/engine_state.h"
#include "daemon/engine/generate_turn.h"
#include "daemon/sessions/session_ops.h"
#include "daemon/loaders/model_loader.h"
#include "tests/support/test_model.h"

namespace niels::daemon::engine {
namespace {

using common::Status;
using std::chrono::seconds;

constexpr uint32_t kUid = 1000;

// A Work's answer, whichever way it came.
struct Answer {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<Status> status;  // OK: answered by quick work or a committed turn
  std::vector<int32_t> ids;      // a committed generation's new ids
  std::vector<StepEvent> events;
  bool used_kv_cache = false;
  int answers = 0;

  void Set(Status s) {
    std::lock_guard lock(mutex);
    status = std::move(s);
    ++answers;
    cv.notify_all();
  }
  Status Wait() {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(cv.wait_for(lock, seconds(60), [this] { return status.has_value(); })) << "no answer in 60 s";
    return status.value_or(Status::Internal("no answer"));
  }
};

std::shared_ptr<std::atomic<bool>> NewFlag() { return std::make_shared<std::atomic<bool>>(false); }

// Quick work that records the order it ran in.
Work QuickWork(std::shared_ptr<Answer> answer, std::string session, std::vector<std::string>* log,
               std::string name) {
  Work work;
  work.owner = kUid;
  work.session_id = std::move(session);
  work.cancel = NewFlag();
  work.quick = [answer, log, name](EngineState&, const Work&) {
    log->push_back(name);
    answer->Set(Status::Ok());
    return Status::Ok();
  };
  work.fail = [answer](const Status& status) { answer->Set(status); };
  return work;
}

// A greedy raw generation of `new_tokens` ids on `session` after `input`. With `hold`, the engine
// thread waits for it after the first id (so that the test can submit work while the turn is
// surely running, however fast the model is).
Work GenerateWork(std::shared_ptr<Answer> answer, const std::string& session, std::vector<int32_t> input,
                  int32_t new_tokens, std::vector<std::string>* log = nullptr, std::string name = {},
                  std::shared_future<void> hold = {}) {
  Work work;
  work.owner = kUid;
  work.session_id = session;
  work.cancel = NewFlag();
  work.start = [=](EngineState& state, const Work& work) {
    GenerateTurnArgs args;
    args.session_id = session;
    args.input = input;
    args.options.max_new_tokens = new_tokens;
    args.options.sampling.temperature = 0.0f;
    args.options.stop_ids = {};  // never stop early
    TurnCallbacks callbacks;
    callbacks.on_token = [answer, hold](const StepEvent& event) {
      {
        std::lock_guard lock(answer->mutex);
        answer->events.push_back(event);
      }
      if (event.index == 0 && hold.valid()) hold.wait();
    };
    callbacks.on_commit = [answer, log, name](const TurnOutcome& outcome) {
      if (log != nullptr) log->push_back(name);
      {
        std::lock_guard lock(answer->mutex);
        answer->ids = outcome.generation.new_tokens;
        answer->used_kv_cache = outcome.generation.used_kv_cache;
      }
      answer->Set(Status::Ok());
    };
    return StartGenerateTurn(state, work, std::move(args), std::move(callbacks));
  };
  work.fail = [answer](const Status& status) { answer->Set(status); };
  return work;
}

class EngineWorkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::ModelConfig config = niels::testing::TinyConfig();
    config.context = 256;
    niels::testing::WriteModelDir(dir_.path(), config, /*seed=*/7);
    EngineOptions options;
    options.threads = 1;
    auto made = MakeEngine(dir_.path(), options);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    engine_ = std::move(made).value();
  }

  // A new empty session of kUid, made on the engine thread.
  std::string NewSession() {
    auto answer = std::make_shared<Answer>();
    auto id = std::make_shared<std::string>();
    Work work;
    work.owner = kUid;
    work.cancel = NewFlag();
    work.quick = [answer, id](EngineState& state, const Work& work) {
      common::StatusOr<sessions::CreatedSession> created =
          sessions::CreateSession(state.sessions, state.language_model(), state.chat_format(), work.owner, std::nullopt);
      if (!created.ok()) return created.status();
      *id = created->session->id();
      answer->Set(Status::Ok());
      return Status::Ok();
    };
    work.fail = [answer](const Status& status) { answer->Set(status); };
    engine_->Submit(std::move(work));
    EXPECT_TRUE(answer->Wait().ok());
    return *id;
  }

  niels::testing::TempDir dir_{"niels_engine_work_test_"};
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineWorkTest, RefusesWorkWithNothingOrTwoThingsToRun) {
  for (int both = 0; both < 2; ++both) {
    auto answer = std::make_shared<Answer>();
    std::vector<std::string> log;
    Work work = QuickWork(answer, "", &log, "q");
    if (both == 0) work.quick = nullptr;
    if (both == 1) work.start = [](EngineState&, const Work&) -> TurnResult { return TurnStart{}; };
    engine_->Submit(std::move(work));
    EXPECT_EQ(answer->Wait().code(), common::StatusCode::kInvalidArgument);
    EXPECT_TRUE(log.empty());
  }
}

TEST_F(EngineWorkTest, QuickWorkIsAnsweredOnceAndAfterShutdownIsRefused) {
  auto answer = std::make_shared<Answer>();
  std::vector<std::string> log;
  engine_->Submit(QuickWork(answer, "", &log, "q"));
  EXPECT_TRUE(answer->Wait().ok());
  engine_->Shutdown();
  auto late = std::make_shared<Answer>();
  engine_->Submit(QuickWork(late, "", &log, "late"));
  EXPECT_EQ(late->Wait().code(), common::StatusCode::kUnavailable);
  EXPECT_EQ(log, std::vector<std::string>{"q"});
  EXPECT_EQ(answer->answers, 1);
}

TEST_F(EngineWorkTest, GreedyGenerationEqualsTheFullForwardAndMarksItsLastEvent) {
  const std::string session = NewSession();
  const std::vector<int32_t> prompt = {5, 9, 11, 3, 7, 2};
  auto answer = std::make_shared<Answer>();
  engine_->Submit(GenerateWork(answer, session, prompt, 12));
  ASSERT_TRUE(answer->Wait().ok());
  ASSERT_EQ(answer->ids.size(), 12u);
  EXPECT_TRUE(answer->used_kv_cache);
  ASSERT_EQ(answer->events.size(), 12u);
  for (size_t i = 0; i < answer->events.size(); ++i) {
    EXPECT_EQ(answer->events[i].index, static_cast<int32_t>(i));
    EXPECT_EQ(answer->events[i].last, i + 1 == answer->events.size()) << i;
  }
  // Independent reference: the full forward over the growing sequence, argmax at the last position.
  auto loaded = loaders::LoadModel(dir_.path());
  ASSERT_TRUE(loaded.ok());
  std::vector<int32_t> tokens = prompt;
  for (int32_t id : answer->ids) {
    const std::vector<float> logits = (*loaded)->transformer->Forward(tokens, /*last_only=*/true);
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), id);
    tokens.push_back(id);
  }
}

TEST_F(EngineWorkTest, WorkOnOneSessionKeepsItsOrderWhileOtherWorkIsAnsweredBetweenSteps) {
  const std::string busy = NewSession();
  std::vector<std::string> log;  // appended on the engine thread only
  auto generation = std::make_shared<Answer>();
  auto behind = std::make_shared<Answer>();
  auto other = std::make_shared<Answer>();
  std::promise<void> submitted;
  engine_->Submit(GenerateWork(generation, busy, {4, 8, 15, 16}, 150, &log, "generation", submitted.get_future().share()));
  engine_->Submit(QuickWork(behind, busy, &log, "same session"));
  engine_->Submit(QuickWork(other, "", &log, "no session"));
  submitted.set_value();  // the generation may go on past its first id
  ASSERT_TRUE(generation->Wait().ok());
  ASSERT_TRUE(behind->Wait().ok());
  ASSERT_TRUE(other->Wait().ok());
  // The quick work naming no session did not wait for the 150-token generation; the one naming its
  // session waited for the whole turn.
  EXPECT_EQ(log, (std::vector<std::string>{"no session", "generation", "same session"}));
}

TEST_F(EngineWorkTest, CancelledWaitingWorkIsAnsweredWithoutRunning) {
  const std::string busy = NewSession();
  std::vector<std::string> log;
  auto generation = std::make_shared<Answer>();
  auto queued = std::make_shared<Answer>();
  engine_->Submit(GenerateWork(generation, busy, {4, 8, 15, 16}, 200, &log, "generation"));
  Work waiting = QuickWork(queued, busy, &log, "cancelled");
  std::shared_ptr<std::atomic<bool>> cancel = waiting.cancel;
  engine_->Submit(std::move(waiting));
  cancel->store(true);
  EXPECT_EQ(queued->Wait().code(), common::StatusCode::kCancelled);
  ASSERT_TRUE(generation->Wait().ok());
  EXPECT_EQ(log, std::vector<std::string>{"generation"});
}

}  // namespace
}  // namespace niels::daemon::engine
