#pragma once
// WorkerPool: a fixed set of threads that run one data-parallel job at a time together with the
// calling thread. Made for the decode step's matrix-vector products: about 40 jobs per token, each
// 10-300 microseconds long and a few microseconds apart, where waking a sleeping thread for every
// job would cost as much as the job.
//
// Run(fn) calls fn(part, parts) exactly once for every part in [0, parts) and returns when every
// call has returned. parts == threads(). Parts are claimed, not assigned: the caller and every
// awake worker take the next unclaimed part until none is left, so a worker that the OS has not
// scheduled (a busy machine) never holds a job up -- the caller runs its part instead. Which thread
// runs a part never changes what the part computes (fn sees only part and parts).
// Between jobs a worker busy-waits for a short while (kSpin), then sleeps on a futex, so an idle
// daemon costs no CPU. The caller waiting for parts that workers are still running spins briefly,
// then sleeps on a futex too, so it never burns a core a descheduled worker needs. fn must not
// throw.
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

  // Test hook: while paused, woken workers claim no part (as if the OS did not schedule them), so
  // tests can check that a job never waits for a worker.
  void TEST_PauseWorkers(bool paused) { test_paused_.store(paused, std::memory_order_relaxed); }

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
  void WorkerLoop();
  // Returns the generation of the next job after `seen` (spinning, then sleeping).
  uint64_t AwaitJob(uint64_t seen);
  // Claims and runs unclaimed parts of job `generation` until none is left (or that job is over).
  void RunClaimedParts(uint64_t generation);
  // The caller's wait until every part of the current job has returned.
  void AwaitFinished();

  const int threads_;
  std::mutex run_mutex_;  // held by the one caller whose job the workers run
  JobFn job_ = nullptr;   // written before generation_ is bumped, read after a part is claimed
  void* job_context_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per job; workers wait for it to change
  // (generation << 16) | next unclaimed part of the current job; a claim is a compare-exchange,
  // so a worker that wakes after its job ended claims nothing of the next one by mistake.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> finished_{0};  // parts of the current job that have returned
  std::atomic<bool> stopping_{false};
  std::atomic<bool> test_paused_{false};
  std::vector<std::thread> workers_;
};

}  // namespace niels::daemon::kernels
