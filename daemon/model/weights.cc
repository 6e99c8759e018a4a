#include "daemon/model/weights.h"

#include <map>
#include <string>

#include <c10/util/Exception.h>
#include <fmt/format.h>

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

bool IsFloatDtype(SafetensorsDtype d) {
  return d == SafetensorsDtype::kF32 || d == SafetensorsDtype::kF16 || d == SafetensorsDtype::kBF16;
}

// Checks names, dtypes and shapes of every stored tensor against `config` (lm_head.weight may be
// present with the tok_emb shape).
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
    if (!IsFloatDtype(info.dtype)) {
      return Status::InvalidArgument(name + ": tensor " + info.name + " has dtype " +
                                     std::string(SafetensorsDtypeName(info.dtype)) +
                                     ", expected F32 (or F16/BF16)");
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

StatusOr<Weights> LoadChecked(const std::shared_ptr<const SafetensorsFile>& file, const ModelConfig& config) {
  NIELS_RETURN_IF_ERROR(CheckFileCanHold(*file, config));
  NIELS_RETURN_IF_ERROR(CheckTensors(*file, config));
  Weights w;
  w.blocks.resize(static_cast<size_t>(config.layers));
  VisitTensors(w, [&](const std::string& tensor, torch::Tensor& slot) {
    slot = file->FloatTensor(*file->Find(tensor));
  });
  if (const SafetensorsTensorInfo* lm_head = file->Find(kLmHead)) {
    if (!torch::equal(file->FloatTensor(*lm_head), w.tok_emb)) {
      return Status::InvalidArgument(file->path().string() +
                                     ": tensor lm_head.weight is not equal to tok_emb.weight "
                                     "(niels_gpt ties them; an untied lm_head is not supported)");
    }
  }
  w.backing = file;
  return w;
}

}  // namespace

int64_t Weights::bytes() const {
  int64_t total = 0;
  VisitTensors(*this, [&](const std::string&, const torch::Tensor& t) {
    if (t.defined()) total += t.numel() * static_cast<int64_t>(t.element_size());
  });
  return total;
}

std::vector<std::pair<std::string, torch::Tensor>> Weights::Named() const {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  VisitTensors(*this, [&](const std::string& name, const torch::Tensor& t) { named.emplace_back(name, t); });
  return named;
}

StatusOr<Weights> LoadWeights(const std::filesystem::path& safetensors_path, const ModelConfig& config) {
  try {
    auto file = SafetensorsFile::Open(safetensors_path);
    if (!file.ok()) return file.status();
    return LoadChecked(*file, config);
  } catch (const c10::Error& e) {
    return Status::Internal(safetensors_path.string() + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::Internal(safetensors_path.string() + ": " + e.what());
  }
}

Status SaveWeights(const Weights& weights, const std::filesystem::path& safetensors_path) {
  try {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (auto& [name, t] : weights.Named()) {
      if (!t.defined()) return Status::InvalidArgument("SaveWeights: tensor " + name + " is undefined");
      tensors.emplace_back(name, t.to(torch::kFloat32));
    }
    return WriteSafetensors(safetensors_path, tensors);
  } catch (const c10::Error& e) {
    return Status::Internal(safetensors_path.string() + ": " + e.what_without_backtrace());
  }
}

}  // namespace niels::daemon::model
