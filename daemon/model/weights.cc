#include "daemon/model/weights.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/safetensors.h"

namespace niels::daemon::model {
namespace {

using common::Status;
using common::StatusOr;

constexpr std::string_view kLmHead = "lm_head.weight";

// Calls f(name, tensor&) for every tensor of `w` in the fixed state_dict order. W is Weights or
// const Weights.
template <typename W, typename F>
void VisitTensors(W& w, F&& f) {
  f(std::string("tok_emb.weight"), w.tok_emb);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    auto& b = w.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    f(p + "ln1.weight", b.ln1);
    f(p + "attn.qkv.weight", b.qkv);
    f(p + "attn.proj.weight", b.proj);
    f(p + "ln2.weight", b.ln2);
    f(p + "mlp.fc_a.weight", b.fc_a_w);
    f(p + "mlp.fc_a.bias", b.fc_a_b);
    f(p + "mlp.fc_g.weight", b.fc_g_w);
    f(p + "mlp.fc_g.bias", b.fc_g_b);
    f(p + "mlp.fc_out.weight", b.fc_out_w);
    f(p + "mlp.fc_out.bias", b.fc_out_b);
  }
  f(std::string("ln_f.weight"), w.ln_f);
}

// The shape every tensor must have under `c`, by name.
std::map<std::string, std::vector<int64_t>> ExpectedShapes(const ModelConfig& c) {
  const int64_t C = c.width;
  std::map<std::string, std::vector<int64_t>> shapes;
  shapes["tok_emb.weight"] = {c.vocab_size, C};
  shapes["ln_f.weight"] = {C};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    shapes[p + "ln1.weight"] = {C};
    shapes[p + "ln2.weight"] = {C};
    shapes[p + "attn.qkv.weight"] = {3 * C, C};
    shapes[p + "attn.proj.weight"] = {C, C};
    shapes[p + "mlp.fc_a.weight"] = {c.d_ff, C};
    shapes[p + "mlp.fc_a.bias"] = {c.d_ff};
    shapes[p + "mlp.fc_g.weight"] = {c.d_ff, C};
    shapes[p + "mlp.fc_g.bias"] = {c.d_ff};
    shapes[p + "mlp.fc_out.weight"] = {C, c.d_ff};
    shapes[p + "mlp.fc_out.bias"] = {C};
  }
  return shapes;
}

std::optional<Dtype> ModelDtype(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::kF32: return Dtype::kF32;
    case SafetensorsDtype::kF16: return Dtype::kF16;
    case SafetensorsDtype::kBF16: return Dtype::kBF16;
    default: return std::nullopt;
  }
}

SafetensorsDtype FileDtype(Dtype d) {
  switch (d) {
    case Dtype::kF32: return SafetensorsDtype::kF32;
    case Dtype::kF16: return SafetensorsDtype::kF16;
    case Dtype::kBF16: return SafetensorsDtype::kBF16;
  }
  return SafetensorsDtype::kF32;
}

// Checks names, dtypes and shapes of every stored tensor against `config` (lm_head.weight may be
// present with the tok_emb shape): one dtype, F32, F16 or BF16, for all of them.
Status CheckTensors(const SafetensorsFile& file, const ModelConfig& config) {
  const std::string name = file.path().string();
  auto expected = ExpectedShapes(config);
  expected[std::string(kLmHead)] = {config.vocab_size, config.width};
  for (const auto& info : file.tensors()) {
    auto it = expected.find(info.name);
    if (it == expected.end()) {
      return Status::InvalidArgument(name + ": unexpected tensor " + info.name + " " +
                                     ShapeString(info.shape) + " (not part of a niels_gpt model with L = " +
                                     std::to_string(config.layers) + ")");
    }
    if (!ModelDtype(info.dtype)) {
      return Status::InvalidArgument(name + ": tensor " + info.name + " has dtype " +
                                     std::string(SafetensorsDtypeName(info.dtype)) + ", expected F32, F16 or BF16");
    }
    if (info.shape != it->second) {
      std::string msg = name + ": tensor " + info.name + " has shape " + ShapeString(info.shape) +
                        ", expected " + ShapeString(it->second);
      if (info.name == "tok_emb.weight" || info.name == kLmHead) {
        msg += " (config V = " + std::to_string(config.vocab_size) + ", C = " + std::to_string(config.width) + ")";
      }
      return Status::InvalidArgument(msg);
    }
  }
  expected.erase(std::string(kLmHead));
  std::vector<std::string> missing;
  for (const auto& [tensor, shape] : expected) {
    if (file.Find(tensor) == nullptr) missing.push_back(tensor + " " + ShapeString(shape));
  }
  if (!missing.empty()) {
    std::string msg = name + ": missing tensor" + (missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < missing.size() && i < 8; ++i) {
      if (i > 0) msg += ", ";
      msg += missing[i];
    }
    if (missing.size() > 8) msg += ", ... (" + std::to_string(missing.size()) + " in all)";
    return Status::InvalidArgument(msg);
  }
  // One dtype for all: the model's is tok_emb.weight's.
  const SafetensorsTensorInfo& tok_emb = *file.Find("tok_emb.weight");
  for (const auto& info : file.tensors()) {
    if (info.dtype != tok_emb.dtype) {
      return Status::InvalidArgument(fmt::format(
          "{}: tensor {} has dtype {} but tok_emb.weight has {}: a model file holds all its tensors in one dtype "
          "(niels-convert --dtype writes f32, f16 or bf16)",
          name, info.name, SafetensorsDtypeName(info.dtype), SafetensorsDtypeName(tok_emb.dtype)));
    }
  }
  return Status::Ok();
}

// Checks that the file can hold a model of `config` at all (at least one tensor per layer, and enough
// bytes for every parameter at 2 bytes each) before anything is allocated per layer: a config.json
// with a huge L or d_ff is refused here instead of building millions of expected tensor names. (The
// exact per-tensor checks that follow name a missing tensor precisely.)
Status CheckFileCanHold(const SafetensorsFile& file, const ModelConfig& c) {
  const long double C = c.width, F = c.d_ff;
  const long double per_layer = 2 * C + 3 * C * C + C * C + 2 * F * C + 2 * F + C * F + C;
  const long double parameters = static_cast<long double>(c.vocab_size) * C + C + c.layers * per_layer;
  const long double needed = 2 * parameters;  // bytes, at the smallest dtype (f16/bf16)
  const long double tensors = 2 + 10.0L * c.layers;
  if (needed > static_cast<long double>(file.mapping_size()) ||
      static_cast<size_t>(c.layers) > file.tensors().size()) {
    return Status::InvalidArgument(fmt::format(
        "{}: holds {} tensors in {} bytes, but config.json (V = {}, C = {}, L = {}, d_ff = {}) describes "
        "{:.0Lf} tensors and {:.0Lf} parameters (at least {:.0Lf} bytes)",
        file.path().string(), file.tensors().size(), file.mapping_size(), c.vocab_size, c.width, c.layers,
        c.d_ff, tensors, parameters, needed));
  }
  return Status::Ok();
}

// An owned, uninitialized buffer of `bytes` bytes, kept alive by `backing`.
void* NewBuffer(int64_t bytes, std::vector<std::shared_ptr<const void>>& backing) {
  std::shared_ptr<std::byte[]> buffer(new std::byte[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
  void* data = buffer.get();
  backing.push_back(std::shared_ptr<const void>(std::move(buffer), data));
  return data;
}

// `source` (any dtype, any alignment) as a new tensor of `dtype`, via float. A finite value that
// becomes infinite (beyond f16's range) is refused, naming `where`.
StatusOr<Tensor> Converted(const void* source, Dtype source_dtype, const std::vector<int64_t>& shape, Dtype dtype,
                           const std::string& where, std::vector<std::shared_ptr<const void>>& backing) {
  Tensor out{nullptr, dtype, shape};
  const int64_t n = out.numel();
  std::vector<float> floats(static_cast<size_t>(n));
  if (n > 0) {
    // Through an aligned copy: the source may sit at any byte offset of the file.
    std::vector<std::byte> aligned(static_cast<size_t>(n * kernels::DtypeSize(source_dtype)));
    std::memcpy(aligned.data(), source, aligned.size());
    kernels::simd::ToFloat(aligned.data(), source_dtype, n, floats.data());
  }
  void* data = NewBuffer(out.bytes(), backing);
  kernels::simd::FromFloat(floats.data(), n, dtype, data);
  out.data = data;
  if (dtype == Dtype::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(floats[i]) && !std::isfinite(kernels::ElementToFloat(data, dtype, i))) {
        return Status::InvalidArgument(fmt::format("{} has a value ({}) beyond f16's range (65504); keep it in f32 "
                                                   "or bf16",
                                                   where, floats[i]));
      }
    }
  }
  return out;
}

// The tensor of `info` as the model keeps it: matrices in `dtype`, norms and biases in f32; a view of
// the mapping when no conversion is needed and the data is aligned, a converted copy otherwise.
StatusOr<Tensor> TensorOf(const SafetensorsFile& file, const SafetensorsTensorInfo& info, Dtype dtype,
                          std::vector<std::shared_ptr<const void>>& backing) {
  const Dtype stored = *ModelDtype(info.dtype);
  const Dtype wanted = Weights::IsMatrix(info.name) ? dtype : Dtype::kF32;
  const std::byte* data = file.Data(info);
  if (stored == wanted && reinterpret_cast<uintptr_t>(data) % kernels::DtypeSize(stored) == 0) {
    return Tensor{data, stored, info.shape};
  }
  return Converted(data, stored, info.shape, wanted, file.path().string() + ": tensor " + info.name, backing);
}

StatusOr<Weights> LoadChecked(const std::shared_ptr<const SafetensorsFile>& file, const ModelConfig& config,
                              const LoadOptions& options) {
  NIELS_RETURN_IF_ERROR(CheckFileCanHold(*file, config));
  NIELS_RETURN_IF_ERROR(CheckTensors(*file, config));
  const SafetensorsTensorInfo& tok_emb = *file->Find("tok_emb.weight");
  const Dtype dtype = options.dtype.value_or(*ModelDtype(tok_emb.dtype));
  Weights w;
  w.backing.push_back(file);
  w.blocks.resize(static_cast<size_t>(config.layers));
  Status status = Status::Ok();
  VisitTensors(w, [&](const std::string& tensor, Tensor& slot) {
    if (!status.ok()) return;
    StatusOr<Tensor> loaded = TensorOf(*file, *file->Find(tensor), dtype, w.backing);
    if (loaded.ok()) {
      slot = std::move(loaded).value();
    } else {
      status = loaded.status();
    }
  });
  NIELS_RETURN_IF_ERROR(status);
  if (const SafetensorsTensorInfo* lm_head = file->Find(kLmHead)) {
    if (std::memcmp(file->Data(*lm_head), file->Data(tok_emb), tok_emb.end - tok_emb.begin) != 0) {
      return Status::InvalidArgument(file->path().string() +
                                     ": tensor lm_head.weight is not equal to tok_emb.weight "
                                     "(niels_gpt ties them; an untied lm_head is not supported)");
    }
  }
  return w;
}

// Box-Muller over a 64-bit Mersenne Twister: the same numbers on every platform and compiler.
class NormalDraws {
 public:
  explicit NormalDraws(uint64_t seed) : rng_(seed) {}

  std::vector<float> Draw(int64_t n, double mean, double std) {
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = static_cast<float>(mean + std * Next());
    return values;
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

}  // namespace

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const float* Tensor::f32() const {
  if (dtype != Dtype::kF32) throw std::logic_error("Tensor::f32 on a " + std::string(kernels::DtypeName(dtype)) + " tensor");
  return static_cast<const float*>(data);
}

std::vector<float> Tensor::ToFloats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) kernels::simd::ToFloat(data, dtype, numel(), out.data());
  return out;
}

bool Weights::IsMatrix(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name == "tok_emb.weight" || name == kLmHead || ends_with("attn.qkv.weight") ||
         ends_with("attn.proj.weight") || ends_with("fc_a.weight") || ends_with("fc_g.weight") ||
         ends_with("fc_out.weight");
}

int64_t Weights::bytes() const {
  int64_t total = 0;
  VisitTensors(*this, [&](const std::string&, const Tensor& t) { total += t.bytes(); });
  return total;
}

std::vector<std::pair<std::string, Tensor>> Weights::Named() const {
  std::vector<std::pair<std::string, Tensor>> named;
  VisitTensors(*this, [&](const std::string& name, const Tensor& t) { named.emplace_back(name, t); });
  return named;
}

StatusOr<Weights> LoadWeights(const std::filesystem::path& safetensors_path, const ModelConfig& config,
                              const LoadOptions& options) {
  try {
    auto file = SafetensorsFile::Open(safetensors_path);
    if (!file.ok()) return file.status();
    return LoadChecked(*file, config, options);
  } catch (const std::exception& e) {
    return Status::Internal(safetensors_path.string() + ": " + e.what());
  }
}

StatusOr<Weights> ConvertWeights(const Weights& weights, Dtype dtype) {
  Weights out = weights;
  Status status = Status::Ok();
  VisitTensors(out, [&](const std::string& name, Tensor& t) {
    if (!status.ok() || !Weights::IsMatrix(name) || t.dtype == dtype) return;
    StatusOr<Tensor> converted = Converted(t.data, t.dtype, t.shape, dtype, "tensor " + name, out.backing);
    if (converted.ok()) {
      t = std::move(converted).value();
    } else {
      status = converted.status();
    }
  });
  NIELS_RETURN_IF_ERROR(status);
  return out;
}

Status SaveWeights(const Weights& weights, const std::filesystem::path& safetensors_path, std::optional<Dtype> dtype) {
  const Dtype target = dtype.value_or(weights.dtype());
  std::vector<std::shared_ptr<const void>> buffers;
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : weights.Named()) {
    if (!t.defined()) return Status::InvalidArgument("SaveWeights: tensor " + name + " is undefined");
    Tensor stored = t;
    if (t.dtype != target) {
      StatusOr<Tensor> converted = Converted(t.data, t.dtype, t.shape, target, "tensor " + name, buffers);
      if (!converted.ok()) return converted.status();
      stored = *converted;
    }
    entries.push_back({name, FileDtype(target), stored.shape, stored.data});
  }
  return WriteSafetensors(safetensors_path, entries);
}

int64_t BytesWithin(const Weights& weights, const void* begin, size_t size) {
  const auto* first = static_cast<const std::byte*>(begin);
  int64_t total = 0;
  for (const auto& [name, t] : weights.Named()) {
    const auto* data = static_cast<const std::byte*>(t.data);
    if (data >= first && data + t.bytes() <= first + size) total += t.bytes();
  }
  return total;
}

Weights RandomWeights(const ModelConfig& config, uint64_t seed, double std) {
  const int64_t c = config.width;
  const int64_t d_ff = config.d_ff;
  NormalDraws draw(seed);
  Weights w;
  auto matrix = [&](int64_t rows, int64_t cols) { return OwnedTensor(draw.Draw(rows * cols, 0.0, std), {rows, cols}, w.backing); };
  auto bias = [&](int64_t n) { return OwnedTensor(draw.Draw(n, 0.0, std), {n}, w.backing); };
  auto norm = [&](int64_t n) { return OwnedTensor(draw.Draw(n, 1.0, 0.1), {n}, w.backing); };
  w.tok_emb = matrix(config.vocab_size, c);  // [V, C]
  for (int64_t i = 0; i < config.layers; ++i) {
    BlockWeights block;
    block.ln1 = norm(c);                 // [C]
    block.qkv = matrix(3 * c, c);        // [3C, C]
    block.proj = matrix(c, c);           // [C, C]
    block.ln2 = norm(c);                 // [C]
    block.fc_a_w = matrix(d_ff, c);      // [d_ff, C]
    block.fc_a_b = bias(d_ff);           // [d_ff]
    block.fc_g_w = matrix(d_ff, c);      // [d_ff, C]
    block.fc_g_b = bias(d_ff);           // [d_ff]
    block.fc_out_w = matrix(c, d_ff);    // [C, d_ff]
    block.fc_out_b = bias(c);            // [C]
    w.blocks.push_back(std::move(block));
  }
  w.ln_f = norm(c);  // [C]
  return w;
}

Tensor OwnedTensor(std::vector<float> values, std::vector<int64_t> shape,
                   std::vector<std::shared_ptr<const void>>& backing) {
  auto owned = std::make_shared<const std::vector<float>>(std::move(values));
  const void* data = owned->data();
  backing.push_back(std::shared_ptr<const void>(owned, data));
  return Tensor{data, Dtype::kF32, std::move(shape)};
}

}  // namespace niels::daemon::model
