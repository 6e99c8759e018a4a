#pragma once
// HostTensor: a tensor of any safetensors dtype held in a plain byte buffer, for tests that write
// model files by hand (what libtorch tensors did for these tests before; no libtorch here). The
// 16-bit conversions use kernels/dtype.h's scalar rounding (round to nearest even).

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/formats/safetensors.h"

namespace niels::testing {

using daemon::formats::SafetensorsDtype;
using daemon::formats::SafetensorsDtypeSize;

struct HostTensor {
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  // f32 elements.
  static HostTensor F32(std::vector<int64_t> shape, const std::vector<float>& values) {
    HostTensor t{SafetensorsDtype::kF32, std::move(shape), {}};
    if (static_cast<int64_t>(values.size()) != t.numel()) throw std::invalid_argument("HostTensor: size mismatch");
    t.bytes.resize(values.size() * 4);
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }
  // Standard normal f32 elements, deterministic for a seed.
  static HostTensor Randn(std::vector<int64_t> shape, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(n);
    for (float& v : values) v = normal(rng);
    return F32(std::move(shape), values);
  }
  static HostTensor Filled(std::vector<int64_t> shape, float value) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return F32(std::move(shape), std::vector<float>(n, value));
  }

  // The elements widened to float. REQUIRES: f32, f16, bf16 or f64.
  std::vector<float> Floats() const {
    std::vector<float> out(numel());
    for (int64_t i = 0; i < numel(); ++i) {
      switch (dtype) {
        case SafetensorsDtype::kF32: std::memcpy(&out[i], &bytes[4 * i], 4); break;
        case SafetensorsDtype::kF16: out[i] = daemon::kernels::HalfToFloat(U16(i)); break;
        case SafetensorsDtype::kBF16: out[i] = daemon::kernels::BFloat16ToFloat(U16(i)); break;
        case SafetensorsDtype::kF64: {
          double d;
          std::memcpy(&d, &bytes[8 * i], 8);
          out[i] = static_cast<float>(d);
          break;
        }
        default: throw std::invalid_argument("HostTensor::Floats: not a float dtype");
      }
    }
    return out;
  }
  // Element i as float (see Floats()).
  float At(int64_t i) const { return Floats()[i]; }
  // Sets element i of an f32 tensor.
  void Set(int64_t i, float value) {
    if (dtype != SafetensorsDtype::kF32) throw std::invalid_argument("HostTensor::Set: not f32");
    std::memcpy(&bytes[4 * i], &value, 4);
  }

  // A copy converted to `to`: f16/bf16 rounded to nearest even; f64 exact; integer types truncate.
  HostTensor To(SafetensorsDtype to) const {
    const std::vector<float> values = Floats();
    HostTensor t{to, shape, std::vector<unsigned char>(values.size() * SafetensorsDtypeSize(to))};
    for (size_t i = 0; i < values.size(); ++i) {
      unsigned char* at = &t.bytes[i * SafetensorsDtypeSize(to)];
      switch (to) {
        case SafetensorsDtype::kF32: std::memcpy(at, &values[i], 4); break;
        case SafetensorsDtype::kF16: Put16(at, daemon::kernels::FloatToHalf(values[i])); break;
        case SafetensorsDtype::kBF16: Put16(at, daemon::kernels::FloatToBFloat16(values[i])); break;
        case SafetensorsDtype::kF64: {
          const double d = values[i];
          std::memcpy(at, &d, 8);
          break;
        }
        case SafetensorsDtype::kI64: {
          const int64_t v = static_cast<int64_t>(values[i]);
          std::memcpy(at, &v, 8);
          break;
        }
        case SafetensorsDtype::kU8: *at = static_cast<unsigned char>(static_cast<int>(values[i])); break;
        default: throw std::invalid_argument("HostTensor::To: unsupported dtype");
      }
    }
    return t;
  }

 private:
  uint16_t U16(int64_t i) const {
    uint16_t v;
    std::memcpy(&v, &bytes[2 * i], 2);
    return v;
  }
  static void Put16(unsigned char* at, uint16_t v) { std::memcpy(at, &v, 2); }
};

using HostTensorList = std::vector<std::pair<std::string, HostTensor>>;

// Writes the tensors (in order) with WriteSafetensors.
inline common::Status WriteHostSafetensors(const std::filesystem::path& path, const HostTensorList& tensors) {
  std::vector<daemon::formats::SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype, t.shape, t.bytes.data()});
  return daemon::formats::WriteSafetensors(path, entries);
}

}  // namespace niels::testing
