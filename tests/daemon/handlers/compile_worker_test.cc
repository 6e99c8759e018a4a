// Constraint compiles off the IO and engine threads: through the Service (a compile held in the
// Service's on_compile_start hook until the test releases it, so what waits and what proceeds is
// seen without timing anything) -- Submit returns while the compile runs, one compile per uid at a
// time while another uid's proceeds, the per-uid limit, cancel of a waiting and of a running
// compile, per-session order across a compile, compile errors as before -- and the CompileWorker
// alone (its limit in all, Shutdown).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/handlers/compile_worker.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace compile_worker_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 256;
constexpr char kYesNo[] = "root ::= \"yes\" | \"no\"\n";

// Seen from on_compile_start: which compiles started (by request id, in order) and on which
// thread; holds the compiles of chosen request ids until released.
class CompileGate {
 public:
  explicit CompileGate(std::set<uint64_t> hold) : hold_(std::move(hold)) {}

  void OnStart(const server::Job& job) {
    const uint64_t id = job.request().request_id();
    std::unique_lock lock(mutex_);
    started_.push_back(id);
    cv_.notify_all();
    // A compile on the test's own thread (Submit compiling in place) must not block the test.
    if (std::this_thread::get_id() == test_thread_) {
      ran_on_submitting_thread_ = true;
      return;
    }
    cv_.wait(lock, [&] { return !hold_.contains(id); });
  }

  void Release(uint64_t id) {
    std::lock_guard lock(mutex_);
    hold_.erase(id);
    cv_.notify_all();
  }
  void ReleaseAll() {
    std::lock_guard lock(mutex_);
    hold_.clear();
    cv_.notify_all();
  }
  // Waits until the compile of `id` started (fails the test after 60 s instead of hanging).
  bool WaitStarted(uint64_t id) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return StartedLocked(id); });
  }
  bool Started(uint64_t id) {
    std::lock_guard lock(mutex_);
    return StartedLocked(id);
  }
  std::vector<uint64_t> started() {
    std::lock_guard lock(mutex_);
    return started_;
  }
  bool ran_on_submitting_thread() {
    std::lock_guard lock(mutex_);
    return ran_on_submitting_thread_;
  }

 private:
  bool StartedLocked(uint64_t id) const { return std::find(started_.begin(), started_.end(), id) != started_.end(); }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::set<uint64_t> hold_;
  std::vector<uint64_t> started_;
  const std::thread::id test_thread_ = std::this_thread::get_id();
  bool ran_on_submitting_thread_ = false;
};

// Releases every held compile when the test ends, also after a failed ASSERT (declared after the
// service, so before the service's destructor waits for its compiles).
struct ReleaseOnExit {
  std::shared_ptr<CompileGate> gate;
  ~ReleaseOnExit() { gate->ReleaseAll(); }
};

std::unique_ptr<Service> StartWithGate(const std::shared_ptr<CompileGate>& gate,
                                       CompileWorkerOptions compile_options = {}) {
  ServiceOptions options;
  options.compile = compile_options;
  options.on_compile_start = [gate](const server::Job& job) { gate->OnStart(job); };
  return StartEngine(kContext, {}, std::move(options));
}

std::string NewSession(Service& service, uint32_t uid = kUid) {
  const v1::Response response = Call(service, CreateRequest(), uid);
  EXPECT_TRUE(response.has_create_session()) << response.DebugString();
  return response.create_session().session_id();
}

v1::Request YesNoChat(uint64_t request_id, const std::string& session, const std::string& gbnf = kYesNo) {
  v1::Request request = ChatRequest(session, "go", 40);
  request.set_request_id(request_id);
  request.mutable_chat()->mutable_constraint()->set_gbnf(gbnf);
  return request;
}

v1::Request InfoRequest() {
  v1::Request request;
  request.mutable_info();
  return request;
}

void ExpectYesOrNo(const v1::Response& response) {
  ASSERT_TRUE(response.has_chat()) << response.DebugString();
  EXPECT_TRUE(response.chat().reply() == "yes" || response.chat().reply() == "no") << response.chat().reply();
}

TEST(CompileWorkerTest, SubmitReturnsWhileTheConstraintCompilesOnTheWorker) {
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1});
  auto service = StartWithGate(gate);
  const ReleaseOnExit release{gate};
  const std::string session = NewSession(*service);
  auto held = SubmitAsync(*service, YesNoChat(1, session));
  // Submit returned while the compile is held: it runs on another thread.
  ASSERT_TRUE(gate->WaitStarted(1));
  EXPECT_FALSE(gate->ran_on_submitting_thread());
  EXPECT_EQ(held->finals(), 0);
  // Meanwhile the same (IO) thread submits and gets answers: quick requests and another session's
  // generation.
  EXPECT_TRUE(Call(*service, InfoRequest()).has_info());
  const std::string other = NewSession(*service);
  EXPECT_TRUE(Call(*service, GenerateRequest(other, {5, 6}, 3)).has_generate());
  EXPECT_EQ(held->finals(), 0);
  gate->Release(1);
  ExpectYesOrNo(held->Wait());
  EXPECT_EQ(service->compile_counts().compiled, 1u);
}

TEST(CompileWorkerTest, OneCompilePerUidAtATimeWhileAnotherUidsProceeds) {
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1});
  CompileWorkerOptions options;
  options.max_tasks_per_uid = 4;
  auto service = StartWithGate(gate, options);
  const ReleaseOnExit release{gate};
  const std::string first = NewSession(*service);
  const std::string second = NewSession(*service);
  const std::string others = NewSession(*service, kOtherUid);
  auto a1 = SubmitAsync(*service, YesNoChat(1, first));
  ASSERT_TRUE(gate->WaitStarted(1));
  // The same uid's next compile waits (on another session, so not for the session's order) ...
  auto a2 = SubmitAsync(*service, YesNoChat(2, second));
  // ... while another uid's compile, submitted after it, runs on the free thread and is answered.
  ExpectYesOrNo(SubmitAsync(*service, YesNoChat(3, others), kOtherUid)->Wait());
  EXPECT_FALSE(gate->Started(2)) << "a second compile of one uid started while its first was compiling";
  EXPECT_EQ(a2->finals(), 0);
  // The uid's share: one compiling and three waiting; the fifth is refused at once, naming the limit.
  auto a3 = SubmitAsync(*service, YesNoChat(4, second));
  auto a4 = SubmitAsync(*service, YesNoChat(5, second));
  auto a5 = SubmitAsync(*service, YesNoChat(6, second));
  ASSERT_EQ(a5->finals(), 1);
  const v1::Response refused = a5->Wait();
  EXPECT_EQ(ErrorOf(refused), v1::RESOURCE_EXHAUSTED) << refused.DebugString();
  EXPECT_NE(refused.error().message().find("4 constraint compiles queued or running, the limit per user"),
            std::string::npos)
      << refused.error().message();
  EXPECT_EQ(service->compile_counts().refused, 1u);
  // Once the first is done the others compile, one after the other.
  gate->Release(1);
  for (const auto& sink : {a1, a2, a3, a4}) ExpectYesOrNo(sink->Wait());
  EXPECT_EQ(gate->started(), (std::vector<uint64_t>{1, 3, 2, 4, 5}));
  EXPECT_EQ(service->compile_counts().compiled, 5u);
}

TEST(CompileWorkerTest, AUidWithQueuedCompilesDelaysAnotherUidsByOneCompileAtMost) {
  constexpr uint32_t kThirdUid = 1001;
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1, 2});
  auto service = StartWithGate(gate);
  const std::string a = NewSession(*service);
  const std::string c = NewSession(*service, kOtherUid);
  const std::string b = NewSession(*service, kThirdUid);
  // Both threads busy: uid A's and uid C's first compiles are held.
  auto a1 = SubmitAsync(*service, YesNoChat(1, a));
  ASSERT_TRUE(gate->WaitStarted(1));
  auto c1 = SubmitAsync(*service, YesNoChat(2, c), kOtherUid);
  ASSERT_TRUE(gate->WaitStarted(2));
  // A queues two more and C one; then B's first arrives, last in the queue.
  auto a2 = SubmitAsync(*service, YesNoChat(3, a));
  auto a3 = SubmitAsync(*service, YesNoChat(4, a));
  auto c2 = SubmitAsync(*service, YesNoChat(5, c), kOtherUid);
  auto b1 = SubmitAsync(*service, YesNoChat(6, b), kThirdUid);
  // A's thread frees up: B, which has not compiled yet, goes before A's own next compiles.
  gate->Release(1);
  for (const auto& sink : {a1, b1, a2, a3}) ExpectYesOrNo(sink->Wait());
  gate->Release(2);
  for (const auto& sink : {c1, c2}) ExpectYesOrNo(sink->Wait());
  EXPECT_EQ(gate->started(), (std::vector<uint64_t>{1, 2, 6, 3, 4, 5}));
}

TEST(CompileWorkerTest, CancelledCompilesAreAnsweredWithoutCompiling) {
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1});
  auto service = StartWithGate(gate);
  const ReleaseOnExit release{gate};
  const std::string session = NewSession(*service);
  ASSERT_TRUE(Call(*service, ChatRequest(session, "hello", 3)).has_chat());
  const v1::SessionInfo before = Call(*service, GetRequest(session)).get_session().session();
  auto running_cancel = std::make_shared<std::atomic<bool>>(false);
  auto running = SubmitAsync(*service, YesNoChat(1, session), kUid, running_cancel);
  ASSERT_TRUE(gate->WaitStarted(1));
  // A compile waiting for its uid's turn, then cancelled (what Cancel or a disconnect does): it
  // leaves the queue and is answered while the compile ahead of it still runs.
  auto waiting_cancel = std::make_shared<std::atomic<bool>>(false);
  auto waiting = SubmitAsync(*service, YesNoChat(2, session), kUid, waiting_cancel);
  waiting_cancel->store(true);
  const v1::Response cancelled = waiting->Wait();
  EXPECT_EQ(ErrorOf(cancelled), v1::CANCELLED) << cancelled.DebugString();
  EXPECT_EQ(running->finals(), 0);
  // The running compile is cancelled too: it stops at its check and never reaches the engine.
  running_cancel->store(true);
  gate->Release(1);
  EXPECT_EQ(ErrorOf(running->Wait()), v1::CANCELLED);
  EXPECT_FALSE(gate->Started(2));
  EXPECT_EQ(service->compile_counts().cancelled, 2u);
  const v1::SessionInfo after = Call(*service, GetRequest(session)).get_session().session();
  EXPECT_EQ(after.length(), before.length());
  EXPECT_EQ(after.turns(), before.turns());
  // The uid's slot is free again.
  ExpectYesOrNo(Call(*service, YesNoChat(3, session)));
}

TEST(CompileWorkerTest, RequestsOnACompilingSessionKeepTheirOrder) {
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1});
  auto service = StartWithGate(gate);
  const ReleaseOnExit release{gate};
  const std::string session = NewSession(*service);
  const std::string other = NewSession(*service);
  auto chat = SubmitAsync(*service, YesNoChat(1, session));
  ASSERT_TRUE(gate->WaitStarted(1));
  // Submitted after the compiling chat on its session: held here, not in the engine's queue.
  auto generate = SubmitAsync(*service, GenerateRequest(session, {5, 6}, 3));
  auto get = SubmitAsync(*service, GetRequest(session));
  EXPECT_EQ(service->held_requests(), 2u);
  // Another session's requests are not held.
  EXPECT_TRUE(Call(*service, GenerateRequest(other, {7}, 2)).has_generate());
  EXPECT_EQ(service->held_requests(), 2u);
  EXPECT_EQ(generate->finals() + get->finals(), 0);
  gate->Release(1);
  const v1::Response chat_done = chat->Wait();
  ExpectYesOrNo(chat_done);
  const v1::Response generate_done = generate->Wait();
  const v1::Response get_done = get->Wait();
  ASSERT_TRUE(generate_done.has_generate()) << generate_done.DebugString();
  ASSERT_TRUE(get_done.has_get_session()) << get_done.DebugString();
  // The chat ran first, then the generation on top of it, then the read.
  EXPECT_EQ(generate_done.generate().session_length(),
            chat_done.chat().session_length() + 2 + generate_done.generate().new_ids_size());
  EXPECT_EQ(get_done.get_session().session().length(), generate_done.generate().session_length());
  EXPECT_EQ(service->held_requests(), 0u);
}

TEST(CompileWorkerTest, AnInvalidGrammarIsStillInvalidArgumentFromTheWorker) {
  auto gate = std::make_shared<CompileGate>(std::set<uint64_t>{1});
  auto service = StartWithGate(gate);
  const ReleaseOnExit release{gate};
  const std::string session = NewSession(*service);
  const int64_t length = Call(*service, GetRequest(session)).get_session().session().length();
  auto bad = SubmitAsync(*service, YesNoChat(1, session, "root ::= (\n"));
  ASSERT_TRUE(gate->WaitStarted(1));
  EXPECT_FALSE(gate->ran_on_submitting_thread());
  auto get = SubmitAsync(*service, GetRequest(session));  // held behind the failing compile
  EXPECT_EQ(service->held_requests(), 1u);
  gate->Release(1);
  const v1::Response refused = bad->Wait();
  EXPECT_EQ(ErrorOf(refused), v1::INVALID_ARGUMENT) << refused.DebugString();
  EXPECT_NE(refused.error().message().find("constraint.gbnf"), std::string::npos) << refused.error().message();
  const v1::Response got = get->Wait();
  ASSERT_TRUE(got.has_get_session()) << got.DebugString();
  EXPECT_EQ(got.get_session().session().length(), length);
}

// The worker alone: tasks that wait on a flag the test sets.
struct HeldTask {
  std::mutex mutex;
  std::condition_variable cv;
  bool started = false, released = false;
  std::vector<common::Status> answers;

  CompileWorker::Task Make(uint32_t uid, std::shared_ptr<std::atomic<bool>> cancel = nullptr) {
    CompileWorker::Task task;
    task.owner = uid;
    task.cancel = cancel ? std::move(cancel) : std::make_shared<std::atomic<bool>>(false);
    task.run = [this](const CompileWorker::Cancelled& cancelled) {
      std::unique_lock lock(mutex);
      started = true;
      cv.notify_all();
      cv.wait(lock, [this] { return released; });
      return cancelled() ? common::Status::Cancelled("stopped") : common::Status::Ok();
    };
    task.done = [this](const common::Status& status) {
      std::lock_guard lock(mutex);
      answers.push_back(status);
      cv.notify_all();
    };
    return task;
  }
  bool WaitStarted() {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(60), [this] { return started; });
  }
  void Release() {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
  std::vector<common::Status> Answers() {
    std::lock_guard lock(mutex);
    return answers;
  }
};

TEST(CompileWorkerTest, TheLimitInAllRefusesAndShutdownAnswersEveryTask) {
  CompileWorkerOptions options;
  options.threads = 1;
  options.max_tasks = 2;
  CompileWorker worker(options);
  HeldTask first, second, third;
  ASSERT_TRUE(worker.Submit(first.Make(1)).ok());
  ASSERT_TRUE(first.WaitStarted());
  ASSERT_TRUE(worker.Submit(second.Make(2)).ok());
  const common::Status refused = worker.Submit(third.Make(3));
  EXPECT_EQ(refused.code(), common::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("queue is full (2 compiles queued or running, the limit in all)"), std::string::npos)
      << refused.message();
  EXPECT_TRUE(third.Answers().empty()) << "a refused task is the caller's to answer";
  // Shutdown: the waiting task is answered CANCELLED, the running one sees `cancelled`.
  std::thread stopper([&] { worker.Shutdown(); });
  {
    std::unique_lock lock(second.mutex);
    ASSERT_TRUE(second.cv.wait_for(lock, std::chrono::seconds(60), [&] { return !second.answers.empty(); }));
  }
  first.Release();
  stopper.join();
  ASSERT_EQ(second.Answers().size(), 1u);
  EXPECT_EQ(second.Answers()[0].code(), common::StatusCode::kCancelled);
  EXPECT_FALSE(second.started);
  ASSERT_EQ(first.Answers().size(), 1u);
  EXPECT_EQ(first.Answers()[0].code(), common::StatusCode::kCancelled);
  EXPECT_EQ(worker.Submit(third.Make(3)).code(), common::StatusCode::kUnavailable);
  const CompileWorker::Counts counts = worker.counts();
  EXPECT_EQ(counts.refused, 1u);
  EXPECT_EQ(counts.compiled, 1u);
  EXPECT_EQ(counts.cancelled, 2u);
}

}  // namespace compile_worker_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
