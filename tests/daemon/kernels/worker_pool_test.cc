#include "daemon/kernels/worker_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace niels::daemon::kernels {
namespace {
namespace worker_pool_test {  // this file's own names: the suite compiles as one unity unit

// Records, for one job, which thread ran which part.
struct PartLog {
  explicit PartLog(int parts) : calls(parts), thread_ids(parts) {}
  std::vector<std::atomic<int>> calls;
  std::vector<std::thread::id> thread_ids;
};

TEST(WorkerPoolTest, EveryPartRunsExactlyOnceOnAPoolThreadOrTheCaller) {
  for (int threads : {1, 2, 3, 4}) {
    WorkerPool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    std::set<std::thread::id> pool_threads;
    for (int job = 0; job < 500; ++job) {  // many short jobs back to back, as in a decode step
      PartLog log(threads);
      pool.Run([&log](int part, int parts) {
        ASSERT_EQ(parts, static_cast<int>(log.calls.size()));
        log.calls[part].fetch_add(1);
        log.thread_ids[part] = std::this_thread::get_id();
      });
      std::set<std::thread::id> distinct;
      for (int part = 0; part < threads; ++part) {
        ASSERT_EQ(log.calls[part].load(), 1) << "threads " << threads << " job " << job << " part " << part;
        distinct.insert(log.thread_ids[part]);
        pool_threads.insert(log.thread_ids[part]);
      }
      // Parts are claimed: a worker that is late leaves its part to the caller (or another worker).
      EXPECT_LE(static_cast<int>(distinct.size()), threads);
    }
    EXPECT_LE(static_cast<int>(pool_threads.size()), threads);  // the caller and the workers only
  }
}

TEST(WorkerPoolTest, WorkersTakeParts) {
  // Each part waits (up to a second, so a busy machine cannot hang the test) until a part has run on
  // a thread other than the caller: a pool whose workers never claimed anything would make every
  // job wait the whole second and fail below.
  for (int threads : {2, 3}) {
    WorkerPool pool(threads);
    const std::thread::id caller = std::this_thread::get_id();
    int jobs_with_a_worker = 0;
    for (int job = 0; job < 5; ++job) {
      std::atomic<bool> worker_ran{false};
      pool.Run([&](int, int) {
        if (std::this_thread::get_id() != caller) worker_ran = true;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!worker_ran.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      });
      jobs_with_a_worker += worker_ran.load() ? 1 : 0;
    }
    EXPECT_GE(jobs_with_a_worker, 4) << "threads " << threads;
  }
}

TEST(WorkerPoolTest, AJobNeverWaitsForAWorkerThatDoesNotRun) {
  // Workers that are awake but not scheduled (paused by the test hook) claim nothing: the caller
  // runs every part itself instead of waiting for them.
  for (int threads : {2, 3, 4}) {
    WorkerPool pool(threads);
    pool.TEST_PauseWorkers(true);
    for (int job = 0; job < 50; ++job) {
      PartLog log(threads);
      pool.Run([&log](int part, int) {
        log.calls[part].fetch_add(1);
        log.thread_ids[part] = std::this_thread::get_id();
      });
      for (int part = 0; part < threads; ++part) {
        ASSERT_EQ(log.calls[part].load(), 1);
        EXPECT_EQ(log.thread_ids[part], std::this_thread::get_id());
      }
    }
    pool.TEST_PauseWorkers(false);
    std::atomic<int> calls{0};
    pool.Run([&calls](int, int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), threads);
  }
}

TEST(WorkerPoolTest, RunReturnsOnlyAfterEveryPartFinished) {
  WorkerPool pool(3);
  for (int job = 0; job < 200; ++job) {
    std::atomic<int> finished{0};
    pool.Run([&finished](int part, int) {
      if (part != 0) std::this_thread::sleep_for(std::chrono::microseconds(50 * part));
      finished.fetch_add(1);
    });
    ASSERT_EQ(finished.load(), 3);
  }
}

TEST(WorkerPoolTest, WakesSleepingWorkersAfterAnIdlePause) {
  WorkerPool pool(2);
  for (int job = 0; job < 3; ++job) {
    std::this_thread::sleep_for(WorkerPool::kSpin * 5);  // the worker is asleep on its futex by now
    std::atomic<int> calls{0};
    pool.Run([&calls](int, int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 2);
  }
}

TEST(WorkerPoolTest, ConcurrentCallersEachGetEveryPartOfTheirOwnJob) {
  WorkerPool pool(2);
  std::atomic<bool> failed{false};
  auto caller = [&pool, &failed] {
    for (int job = 0; job < 3000; ++job) {
      std::atomic<int> mask{0};
      pool.Run([&mask](int part, int) { mask.fetch_or(1 << part); });
      if (mask.load() != 0b11) failed = true;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_FALSE(failed.load());
}

}  // namespace worker_pool_test
}  // namespace
}  // namespace niels::daemon::kernels
