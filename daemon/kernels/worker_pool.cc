#include "daemon/kernels/worker_pool.h"

#include <algorithm>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace niels::daemon::kernels {
namespace {

// Tells the core we are spinning (frees pipeline resources for the other hyperthread, saves power).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) : threads_(std::max(threads, 1)) {
  workers_.reserve(threads_ - 1);
  for (int part = 1; part < threads_; ++part) workers_.emplace_back([this, part] { WorkerLoop(part); });
}

WorkerPool::~WorkerPool() {
  stopping_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void WorkerPool::RunErased(JobFn call, void* context) {
  const int parts = threads_;
  std::unique_lock lock(run_mutex_, std::try_to_lock);
  if (parts == 1 || !lock.owns_lock()) {
    for (int part = 0; part < parts; ++part) call(context, part, parts);
    return;
  }
  job_ = call;
  job_context_ = context;
  pending_.store(parts - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);  // publishes job_, job_context_, pending_
  generation_.notify_all();
  call(context, 0, parts);
  while (pending_.load(std::memory_order_acquire) != 0) CpuRelax();
}

uint64_t WorkerPool::AwaitJob(uint64_t seen) {
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  for (uint32_t round = 1;; ++round) {
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (generation != seen) return generation;
    CpuRelax();
    // Check the clock only every 256 rounds (a pause is ~10-100 ns).
    if (round % 256 == 0 && std::chrono::steady_clock::now() > spin_until) {
      generation_.wait(seen, std::memory_order_acquire);
      return generation_.load(std::memory_order_acquire);
    }
  }
}

void WorkerPool::WorkerLoop(int part) {
  uint64_t seen = 0;
  while (true) {
    seen = AwaitJob(seen);
    if (stopping_.load(std::memory_order_relaxed)) return;
    job_(job_context_, part, threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace niels::daemon::kernels
