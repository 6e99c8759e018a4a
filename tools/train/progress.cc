#include "tools/train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

namespace niels::tools::train {
namespace {

std::string Clock(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

}  // namespace

Progress::Progress(int64_t total_steps, int64_t log_every)
    : total_steps_(total_steps),
      log_every_(log_every > 0 ? log_every : 50),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_),
      cpu_start_(std::clock()) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::Update(int64_t step, double loss, double lr, int64_t tokens) {
  tokens_ += tokens;
  smoothed_loss_ = smoothed_loss_ < 0 ? loss : 0.95 * smoothed_loss_ + 0.05 * loss;
  const auto now = std::chrono::steady_clock::now();
  const bool due = tty_ ? (now - last_draw_ > std::chrono::milliseconds(200) || step == total_steps_)
                        : (step % log_every_ == 0 || step == 1 || step == total_steps_);
  if (!due) return;
  last_draw_ = now;
  Draw(step, lr);
}

void Progress::Draw(int64_t step, double lr) {
  const double elapsed = elapsed_seconds();
  const double tok_s = elapsed > 0 ? tokens_ / elapsed : 0;
  const double eta = step > 0 ? elapsed / step * (total_steps_ - step) : 0;
  if (!tty_) {
    std::fprintf(stderr, "step %lld/%lld loss %.4f lr %.2e %.0f tok/s elapsed %s eta %s\n",
                 static_cast<long long>(step), static_cast<long long>(total_steps_), smoothed_loss_, lr, tok_s,
                 Clock(elapsed).c_str(), Clock(eta).c_str());
    return;
  }
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / total_steps_);
  std::string bar(filled, '=');
  if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
  std::fprintf(stderr, "\r[%s] %lld/%lld loss %.4f %.0f tok/s eta %s  ", bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_steps_), smoothed_loss_, tok_s, Clock(eta).c_str());
  std::fflush(stderr);
}

void Progress::Finish() {
  if (tty_) std::fputc('\n', stderr);
  const double elapsed = elapsed_seconds();
  // CPU seconds of the whole process (all threads): on a shared machine, tokens per CPU second
  // estimate the speed the loop would have alone.
  const double cpu = static_cast<double>(std::clock() - cpu_start_) / CLOCKS_PER_SEC;
  std::fprintf(stderr, "trained %lld steps in %s (%.1f s wall, %.1f s cpu), %.0f tok/s, %.0f tok per cpu-s, final loss %.4f\n",
               static_cast<long long>(total_steps_), Clock(elapsed).c_str(), elapsed, cpu,
               elapsed > 0 ? tokens_ / elapsed : 0.0, cpu > 0 ? tokens_ / cpu : 0.0, smoothed_loss_);
}

}  // namespace niels::tools::train
