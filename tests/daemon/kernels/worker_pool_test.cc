#include "daemon/kernels/worker_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace niels::daemon::kernels {
namespace {

// Records, for one job, which thread ran which part.
struct PartLog {
  explicit PartLog(int parts) : calls(parts), thread_ids(parts) {}
  std::vector<std::atomic<int>> calls;
  std::vector<std::thread::id> thread_ids;
};

// Each part once, part 0 on the caller, part i on worker i or (when worker i had not started on it
// by the time the caller finished part 0) on the caller; never two parts on one worker.
TEST(WorkerPoolTest, EveryPartRunsExactlyOnceOnTheCallerOrItsOwnWorker) {
  for (int threads : {1, 2, 3, 4}) {
    WorkerPool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    for (int job = 0; job < 500; ++job) {  // many short jobs back to back, as in a decode step
      PartLog log(threads);
      pool.Run([&log](int part, int parts) {
        ASSERT_EQ(parts, static_cast<int>(log.calls.size()));
        log.calls[part].fetch_add(1);
        log.thread_ids[part] = std::this_thread::get_id();
      });
      std::set<std::thread::id> workers;
      for (int part = 0; part < threads; ++part) {
        ASSERT_EQ(log.calls[part].load(), 1) << "threads " << threads << " job " << job << " part " << part;
        if (log.thread_ids[part] != std::this_thread::get_id()) {
          EXPECT_TRUE(workers.insert(log.thread_ids[part]).second) << "two parts on one worker";
        }
      }
      EXPECT_EQ(log.thread_ids[0], std::this_thread::get_id()) << "part 0 runs on the caller";
    }
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

// A job whose part 0 takes a while: the sleeping or spinning workers take up their parts (the caller
// does not do everything itself when the workers are there).
TEST(WorkerPoolTest, WorkersTakeTheirPartsOfALongJob) {
  WorkerPool pool(3);
  int on_workers = 0;
  for (int job = 0; job < 20; ++job) {
    std::vector<std::thread::id> ids(3);
    pool.Run([&ids](int part, int) {
      if (part == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ids[part] = std::this_thread::get_id();
    });
    for (int part = 1; part < 3; ++part) on_workers += ids[part] != std::this_thread::get_id();
  }
  EXPECT_GE(on_workers, 30) << "of 40 worker parts, most ran on the workers";
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

}  // namespace
}  // namespace niels::daemon::kernels
