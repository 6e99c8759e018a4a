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

WorkerPool::WorkerPool(int threads)
    : threads_(std::max(threads, 1)), slots_(new std::atomic<int>[std::max(threads, 1)]) {
  for (int part = 0; part < threads_; ++part) slots_[part].store(kDone, std::memory_order_relaxed);
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
  // Opening a slot publishes job_ and job_context_ to the worker that takes it (release/acquire).
  // A worker still waking from an earlier job may take it before it sees the new generation: it
  // then simply runs this job's part.
  for (int part = 1; part < parts; ++part) slots_[part].store(kOpen, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  call(context, 0, parts);
  // Parts no worker has taken yet are run here; then wait for the ones that were taken.
  for (int part = 1; part < parts; ++part) {
    int open = kOpen;
    if (slots_[part].compare_exchange_strong(open, kClaimed, std::memory_order_acq_rel)) call(context, part, parts);
  }
  for (int part = 1; part < parts; ++part) {
    while (slots_[part].load(std::memory_order_acquire) == kTaken) CpuRelax();
  }
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
    int open = kOpen;
    if (!slots_[part].compare_exchange_strong(open, kTaken, std::memory_order_acq_rel)) continue;  // claimed
    job_(job_context_, part, threads_);
    slots_[part].store(kDone, std::memory_order_release);
  }
}

}  // namespace niels::daemon::kernels
