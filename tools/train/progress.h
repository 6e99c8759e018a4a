#pragma once
// Training progress on stderr: a redrawn one-line bar when stderr is a terminal (step, loss,
// tokens/s, ETA), plain periodic lines otherwise (logs, CI). Single-threaded.

#include <chrono>
#include <cstdint>
#include <ctime>

namespace niels::tools::train {

class Progress {
 public:
  // `log_every`: steps between plain lines when stderr is not a terminal.
  Progress(int64_t total_steps, int64_t log_every);

  // Reports step `step` (1-based) with its loss, learning rate and the tokens it processed.
  void Update(int64_t step, double loss, double lr, int64_t tokens);
  // Ends the bar line (terminal) and prints a summary line.
  void Finish();

  double elapsed_seconds() const;
  double smoothed_loss() const { return smoothed_loss_; }

 private:
  void Draw(int64_t step, double lr);

  int64_t total_steps_;
  int64_t log_every_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::clock_t cpu_start_;
  int64_t tokens_ = 0;
  double smoothed_loss_ = -1;  // exponential moving average of the loss
};

}  // namespace niels::tools::train
