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

constexpr int kPartBits = 16;  // threads < 2^16
constexpr uint64_t kPartMask = (uint64_t{1} << kPartBits) - 1;
// How often the caller checks for the last part before it sleeps (a pause is ~10-100 ns, so this
// is some tens of microseconds: about one part's length on an idle machine).
constexpr int kCallerSpinRounds = 2048;

}  // namespace

WorkerPool::WorkerPool(int threads) : threads_(std::clamp(threads, 1, static_cast<int>(kPartMask))) {
  workers_.reserve(threads_ - 1);
  for (int worker = 1; worker < threads_; ++worker) workers_.emplace_back([this] { WorkerLoop(); });
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
  finished_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store(generation << kPartBits, std::memory_order_relaxed);
  generation_.store(generation, std::memory_order_release);  // publishes job_, claim_, finished_
  generation_.notify_all();
  RunClaimedParts(generation);
  AwaitFinished();
}

void WorkerPool::RunClaimedParts(uint64_t generation) {
  const uint64_t tag = generation << kPartBits;
  uint64_t claim = claim_.load(std::memory_order_acquire);
  while ((claim & ~kPartMask) == tag && static_cast<int>(claim & kPartMask) < threads_) {
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
    // The job cannot end (nor job_ change) before this claimed part has returned.
    job_(job_context_, static_cast<int>(claim & kPartMask), threads_);
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) finished_.notify_one();
    claim = claim_.load(std::memory_order_acquire);
  }
}

void WorkerPool::AwaitFinished() {
  for (int round = 0; round < kCallerSpinRounds; ++round) {
    if (finished_.load(std::memory_order_acquire) == threads_) return;
    CpuRelax();
  }
  for (int done = finished_.load(std::memory_order_acquire); done != threads_;
       done = finished_.load(std::memory_order_acquire)) {
    finished_.wait(done, std::memory_order_acquire);
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

void WorkerPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    seen = AwaitJob(seen);
    if (stopping_.load(std::memory_order_relaxed)) return;
    if (test_paused_.load(std::memory_order_relaxed)) continue;
    RunClaimedParts(seen);
  }
}

}  // namespace niels::daemon::kernels
