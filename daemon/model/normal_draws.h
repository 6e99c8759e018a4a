#pragma once
// NormalDraws: seeded normal(mean, std) numbers for random-weight models (RandomWeights, the
// benchmarks' presets). Box-Muller over a 64-bit Mersenne Twister: the same numbers on every
// platform and compiler, so a seed names one model everywhere. Not thread-safe (one per thread).

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace niels::daemon::model {

class NormalDraws {
 public:
  explicit NormalDraws(uint64_t seed) : rng_(seed) {}

  // n draws of normal(mean, std), as f32.
  std::vector<float> Draw(int64_t n, double mean, double std) {
    std::vector<float> values(static_cast<size_t>(n));
    Fill(values.data(), n, mean, std);
    return values;
  }
  // The same into out[0, n).
  void Fill(float* out, int64_t n, double mean, double std) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(mean + std * Next());
  }

 private:
  double Uniform() { return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(Uniform())), angle = 2.0 * M_PI * Uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

  std::mt19937_64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace niels::daemon::model
