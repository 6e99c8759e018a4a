// niels_quantize_check: the reader-side checks of quantize_reference_test.py on one quantized file.
//
//   niels_quantize_check --input IN.gguf --output OUT.gguf [--reference REF.gguf] --ggml LIBGGML_BASE
//                        --type q4_k_m --json RESULT.json
//
// With nielsd's GGUF reader (daemon/formats):
//   1. OUT opens; its metadata is IN's, key for key in order and byte for byte, but general.file_type
//      (llama.cpp's value for --type) and general.quantization_version (2), replaced in place or
//      appended; its tensors are IN's names, dims and order; a tensor whose type changed is of a
//      block type or f16 (the types niels-quantize writes), one whose type stayed holds IN's bytes.
//   2. REF (llama.cpp's llama_model_quantize of IN): the same keys with the same values (its key
//      order differs: llama.cpp appends the two keys it sets) and the same tensors (its order
//      differs: by layer, then name), each of the same type, dims and bytes.
//   3. Every tensor whose type changed, dequantized by nielsd (DequantizeBlocks, legacy_blocks.h,
//      f16 widening) equals ggml's dequantization of the same bytes (dequantize_row_* and
//      ggml_fp16_to_fp32_row of LIBGGML_BASE), bit for bit, and is within its type's error bound of
//      IN's values (kBounds: per block, max |error| / max |value|).
// Writes RESULT: {"ok", "failures": [...], "tensors": [{"name", "type", "dims", "offset"}],
// "reference": {"compared", "equal"}, "dequantized_values", "dequant_mismatches",
// "errors": {type: {"tensors", "max_block_rel", "rms_rel"}}}. Exit status 0 when every check
// passed, 1 otherwise (the failures on stderr), 2 for bad arguments or unreadable files.

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/formats/gguf_file.h"
#include "daemon/formats/gguf_writer.h"
#include "daemon/kernels/dtype.h"
#include "daemon/kernels/quant_blocks.h"
#include "tools/quantize/legacy_blocks.h"
#include "tools/quantize/quant_recipe.h"

namespace {

namespace formats = niels::daemon::formats;
namespace kernels = niels::daemon::kernels;
namespace q = niels::tools::quantize;
using formats::GgmlType;
using formats::GgufFile;

// Per type: the largest |dequantized - input| in a block, as a fraction of the block's largest
// |input|, that the type's scheme allows (derivations in tools/quantize/README.md, "Error bounds").
const std::map<GgmlType, double> kBounds = {
    {GgmlType::kQ8_0, 1.0 / 254 + 1.0 / 2048 + 1e-6},  // half a step of amax/127, plus the f16 scale's rounding
    {GgmlType::kQ4_0, 1.0 / 8 + 1.0 / 2048 + 1e-6},  // the clamped opposite extreme: one step of amax/8
    {GgmlType::kQ5_0, 1.0 / 16 + 1.0 / 2048 + 1e-6},
    {GgmlType::kQ5_1, 1.0 / 31 + 3.0 / 2048 + 1e-6},  // half a step of range/31 (range <= 2 amax), f16 d and m
    {GgmlType::kQ4_K, 0.14},  // fitted scales and mins: measured maxima 0.099, 0.044, 0.018 (README)
    {GgmlType::kQ5_K, 0.07},
    {GgmlType::kQ6_K, 0.035},
    {GgmlType::kF16, 1.0 / 2048 + 1e-7},
};

std::string Encoded(const GgufFile& file, const formats::GgufValue& value) {
  return formats::GgufWriteValue::Copy(file, value).encoded();
}

std::vector<int64_t> Dims(const formats::GgufTensorInfo& t) { return {t.dims, t.dims + t.n_dims}; }

struct Checker {
  nlohmann::json failures = nlohmann::json::array();
  void Fail(const std::string& what) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    failures.push_back(what);
  }
};

std::vector<float> ToFloats(const GgufFile& file, const formats::GgufTensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.elements));
  const std::byte* p = file.TensorData(t);
  for (int64_t i = 0; i < t.elements; ++i) {
    switch (t.type) {
      case GgmlType::kF32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case GgmlType::kF16: out[i] = kernels::ElementToFloat(p, kernels::Dtype::kF16, i); break;
      default: out[i] = kernels::ElementToFloat(p, kernels::Dtype::kBF16, i); break;
    }
  }
  return out;
}

// nielsd's dequantization of a tensor of `type` (the types niels-quantize writes).
std::vector<float> OurDequantization(GgmlType type, const std::byte* data, int64_t elements) {
  std::vector<float> out(static_cast<size_t>(elements));
  const int64_t blocks = elements / formats::GgmlTypeInfo(type).block_size;
  switch (type) {
    case GgmlType::kQ8_0: kernels::DequantizeBlocks(kernels::Dtype::kQ8_0, data, blocks, out.data()); break;
    case GgmlType::kQ4_0: kernels::DequantizeBlocks(kernels::Dtype::kQ4_0, data, blocks, out.data()); break;
    case GgmlType::kQ4_K: kernels::DequantizeBlocks(kernels::Dtype::kQ4_K, data, blocks, out.data()); break;
    case GgmlType::kQ5_K: kernels::DequantizeBlocks(kernels::Dtype::kQ5_K, data, blocks, out.data()); break;
    case GgmlType::kQ6_K: kernels::DequantizeBlocks(kernels::Dtype::kQ6_K, data, blocks, out.data()); break;
    case GgmlType::kQ5_0: q::DequantizeQ5_0(data, blocks, out.data()); break;
    case GgmlType::kQ5_1: q::DequantizeQ5_1(data, blocks, out.data()); break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < elements; ++i) out[i] = kernels::ElementToFloat(data, kernels::Dtype::kF16, i);
      break;
    default: break;
  }
  return out;
}

void CheckMetadata(const GgufFile& in, const GgufFile& out, q::FileType type, Checker* c) {
  size_t i = 0;
  bool have_version = false;
  for (const formats::GgufKeyValue& kv : out.metadata()) {
    const std::string key(kv.key);
    if (key == "general.file_type" || key == "general.quantization_version") {
      const uint32_t expected = key == "general.file_type" ? q::LlamaFileType(type) : 2;
      if (kv.value.type != formats::GgufValueType::kUint32 || *out.GetUint(key) != expected) {
        c->Fail(key + " is not the UINT32 " + std::to_string(expected));
      }
      have_version |= key == "general.quantization_version";
      if (i < in.metadata().size() && in.metadata()[i].key == kv.key) ++i;
      continue;
    }
    if (i >= in.metadata().size() || in.metadata()[i].key != kv.key) {
      c->Fail("metadata key " + key + " is not the input's key at its position");
      return;
    }
    if (Encoded(out, kv.value) != Encoded(in, in.metadata()[i].value)) c->Fail("metadata key " + key + " changed");
    ++i;
  }
  if (i != in.metadata().size()) c->Fail("the output lacks input keys");
  if (!have_version) c->Fail("no general.quantization_version");
}

nlohmann::json CheckReference(const GgufFile& out, const GgufFile& ref, Checker* c) {
  std::map<std::string, std::string> ours, theirs;
  for (const auto& kv : out.metadata()) ours[std::string(kv.key)] = Encoded(out, kv.value);
  for (const auto& kv : ref.metadata()) theirs[std::string(kv.key)] = Encoded(ref, kv.value);
  if (ours != theirs) {
    for (const auto& [key, value] : theirs) {
      if (ours.count(key) == 0 || ours[key] != value) c->Fail("reference key " + key + " differs or is missing");
    }
    for (const auto& [key, value] : ours) {
      if (theirs.count(key) == 0) c->Fail("key " + key + " is not in the reference");
    }
  }
  int compared = 0, equal = 0;
  if (out.tensors().size() != ref.tensors().size()) c->Fail("the reference has another number of tensors");
  for (const formats::GgufTensorInfo& t : out.tensors()) {
    const formats::GgufTensorInfo* r = ref.FindTensor(t.name);
    ++compared;
    if (r == nullptr) {
      c->Fail("tensor " + std::string(t.name) + " is not in the reference");
      continue;
    }
    const bool same = r->type == t.type && Dims(*r) == Dims(t) && r->size_bytes == t.size_bytes &&
                      std::memcmp(ref.TensorData(*r), out.TensorData(t), t.size_bytes) == 0;
    if (same) {
      ++equal;
    } else {
      c->Fail("tensor " + std::string(t.name) + ": ours " + std::string(formats::GgmlTypeName(t.type)) +
              ", llama.cpp's " + std::string(formats::GgmlTypeName(r->type)) +
              (r->type == t.type ? " (bytes or dims differ)" : ""));
    }
  }
  return {{"compared", compared}, {"equal", equal}};
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  for (const char* needed : {"--input", "--output", "--ggml", "--type", "--json"}) {
    if (args.count(needed) == 0) {
      std::fprintf(stderr, "usage: %s --input IN --output OUT [--reference REF] --ggml LIB --type T --json RESULT\n",
                   argv[0]);
      return 2;
    }
  }
  const std::optional<q::FileType> type = q::ParseFileType(args["--type"]);
  auto in = GgufFile::Open(args["--input"]);
  auto out = GgufFile::Open(args["--output"]);
  void* ggml = dlopen(args["--ggml"].c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!type || !in.ok() || !out.ok() || ggml == nullptr) {
    std::fprintf(stderr, "cannot read: %s / %s / %s\n", in.status().ToString().c_str(),
                 out.status().ToString().c_str(), ggml == nullptr ? dlerror() : "ggml ok");
    return 2;
  }
  Checker c;
  nlohmann::json result;
  CheckMetadata(**in, **out, *type, &c);
  if (args.count("--reference") != 0) {
    auto ref = GgufFile::Open(args["--reference"]);
    if (!ref.ok()) {
      std::fprintf(stderr, "%s\n", ref.status().ToString().c_str());
      return 2;
    }
    result["reference"] = CheckReference(**out, **ref, &c);
  }
  if ((*out)->tensors().size() != (*in)->tensors().size()) c.Fail("another number of tensors");
  nlohmann::json tensors = nlohmann::json::array();
  struct ErrorStats {
    int tensors = 0;
    double max_block_rel = 0, rms_rel = 0;
  };
  std::map<std::string, ErrorStats> errors;
  int64_t dequantized = 0, mismatches = 0;
  for (size_t i = 0; i < (*out)->tensors().size() && i < (*in)->tensors().size(); ++i) {
    const formats::GgufTensorInfo& t = (*out)->tensors()[i];
    const formats::GgufTensorInfo& s = (*in)->tensors()[i];
    const std::string name(t.name), type_name(formats::GgmlTypeName(t.type));
    tensors.push_back({{"name", name}, {"type", type_name}, {"dims", Dims(t)}, {"offset", t.offset}});
    if (t.name != s.name || Dims(t) != Dims(s)) c.Fail("tensor " + name + " is not the input's tensor " + std::to_string(i));
    if (t.type == s.type) {
      if (std::memcmp((*out)->TensorData(t), (*in)->TensorData(s), s.size_bytes) != 0) c.Fail(name + ": bytes changed");
      continue;
    }
    if (kBounds.count(t.type) == 0) {
      c.Fail(name + ": unexpected type " + type_name);
      continue;
    }
    const std::vector<float> ours = OurDequantization(t.type, (*out)->TensorData(t), t.elements);
    std::vector<float> theirs(ours.size());
    const std::string symbol = t.type == GgmlType::kF16 ? "ggml_fp16_to_fp32_row" : "dequantize_row_" + type_name;
    auto fn = reinterpret_cast<void (*)(const void*, float*, int64_t)>(dlsym(ggml, symbol.c_str()));
    if (fn == nullptr) return 2;
    fn((*out)->TensorData(t), theirs.data(), t.elements);
    dequantized += t.elements;
    for (size_t k = 0; k < ours.size(); ++k) mismatches += std::memcmp(&ours[k], &theirs[k], 4) != 0;
    // Error against the input, per block of the type (per 32 values for f16: |error| <= 2^-11 |x|).
    const std::vector<float> x = ToFloats(**in, s);
    const int64_t block = t.type == GgmlType::kF16 ? 32 : formats::GgmlTypeInfo(t.type).block_size;
    double max_rel = 0, sum_err2 = 0, sum_x2 = 0;
    for (int64_t b = 0; b * block < t.elements; ++b) {
      double amax = 0, emax = 0;
      for (int64_t k = b * block; k < (b + 1) * block && k < t.elements; ++k) {
        const double e = std::fabs(static_cast<double>(ours[k]) - x[k]);
        amax = std::max(amax, std::fabs(static_cast<double>(x[k])));
        emax = std::max(emax, e);
        sum_err2 += e * e;
        sum_x2 += static_cast<double>(x[k]) * x[k];
      }
      if (amax > 0) max_rel = std::max(max_rel, emax / amax);
    }
    const double rms_rel = sum_x2 > 0 ? std::sqrt(sum_err2 / sum_x2) : 0;
    ErrorStats& e = errors[type_name];
    ++e.tensors;
    e.max_block_rel = std::max(e.max_block_rel, max_rel);
    e.rms_rel = std::max(e.rms_rel, rms_rel);
    if (max_rel > kBounds.at(t.type)) {
      c.Fail(name + " (" + type_name + "): block error " + std::to_string(max_rel) + " of the block's max, bound " +
             std::to_string(kBounds.at(t.type)));
    }
  }
  if (mismatches > 0) c.Fail(std::to_string(mismatches) + " dequantized values differ from ggml's");
  result["ok"] = c.failures.empty();
  result["failures"] = c.failures;
  result["tensors"] = tensors;
  result["dequantized_values"] = dequantized;
  result["dequant_mismatches"] = mismatches;
  for (const auto& [name, e] : errors) {
    result["errors"][name] = {{"tensors", e.tensors}, {"max_block_rel", e.max_block_rel}, {"rms_rel", e.rms_rel}};
  }
  std::ofstream(args["--json"]) << result.dump(1);
  return c.failures.empty() ? 0 : 1;
}
