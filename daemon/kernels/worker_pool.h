#pragma once
// WorkerPool: a fixed set of threads that run one data-parallel job at a time together with the
// calling thread. Made for the model's kernels: a decode step runs about 40 jobs per token, each
// 10-300 microseconds long and a few microseconds apart, where waking a sleeping thread for every
// job would cost as much as the job; a prefill runs fewer, longer ones.
//
// Run(fn) calls fn(part, parts) exactly once for every part in [0, parts) and returns when every
// call has returned; parts == threads(). Part 0 runs on the calling thread; part i on worker i if
// that worker takes it up before the caller has finished part 0, otherwise on the calling thread
// right after (so a worker that the OS has not scheduled -- a busy shared machine -- never holds up
// a job it has not started). Callers that want the work balanced whoever runs it hand out small
// blocks from an atomic counter inside fn (MatVec does). Between jobs a worker busy-waits for a
// short while (kSpin), then sleeps on a futex, so an idle daemon costs no CPU. fn must not throw.
//
// Ownership: whoever builds the model makes one pool and hands it (shared_ptr) to the Transformer;
// there is no process-wide pool.
//
// Thread-safety: Run may be called from any thread. One job runs at a time; a Run that finds the
// workers busy with another caller's job runs all parts itself, serially (same result, no waiting).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace niels::daemon::kernels {

class WorkerPool {
 public:
  // How long an idle worker busy-waits for the next job before it sleeps.
  static constexpr std::chrono::microseconds kSpin{200};

  // threads >= 1 counts the calling thread: WorkerPool(1) starts no thread and runs jobs inline.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return threads_; }

  // fn(int part, int parts) for every part; see the file comment.
  template <typename Fn>
  void Run(Fn&& fn) {
    using Callable = std::remove_reference_t<Fn>;
    RunErased([](void* context, int part, int parts) { (*static_cast<Callable*>(context))(part, parts); },
              const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using JobFn = void (*)(void* context, int part, int parts);

  void RunErased(JobFn call, void* context);
  void WorkerLoop(int part);
  // Returns the generation of the next job after `seen` (spinning, then sleeping).
  uint64_t AwaitJob(uint64_t seen);

  // A worker's part of the current job: kOpen until the worker takes it (kTaken) or the caller
  // does (kClaimed); kDone once the worker has finished it.
  enum Slot : int { kOpen = 0, kTaken = 1, kClaimed = 2, kDone = 3 };

  const int threads_;
  std::mutex run_mutex_;  // held by the one caller whose job the workers run
  JobFn job_ = nullptr;   // written before the slots are opened, read after one is taken
  void* job_context_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per job; workers wait for it to change
  std::unique_ptr<std::atomic<int>[]> slots_;  // [threads_], index 0 unused
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace niels::daemon::kernels
