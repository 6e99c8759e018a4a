#pragma once
// WorkerPool: a fixed set of threads that run one data-parallel job at a time together with the
// calling thread. Made for the decode step's matrix-vector products: about 40 jobs per token, each
// 10-300 microseconds long and a few microseconds apart, where waking a sleeping thread for every
// job would cost as much as the job.
//
// Run(fn) calls fn(part, parts) exactly once for every part in [0, parts) -- part 0 on the calling
// thread, part i on worker i -- and returns when every call has returned. parts == threads().
// Between jobs a worker busy-waits for a short while (kSpin), then sleeps on a futex, so an idle
// daemon costs no CPU. fn must not throw.
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

  const int threads_;
  std::mutex run_mutex_;  // held by the one caller whose job the workers run
  JobFn job_ = nullptr;   // written before generation_ is bumped, read after
  void* job_context_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per job; workers wait for it to change
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace niels::daemon::kernels
