// niels-inspect: loads a model directory with LoadModelDir and prints a summary of it, or writes the
// logits of a token sequence for comparison with another implementation (tests/tools uses this to
// check converted checkpoints against a PyTorch forward).
//
//   niels-inspect DIR                                   summary: config, parameters, bytes, special ids
//   niels-inspect DIR --logits 5,17,3 --out FILE        full uncached forward, logits [n, V]
//   niels-inspect DIR --logits 5,17,3 --out FILE --prefill-decode [--prefill K]
//                                                       the same logits via the KV cache: Prefill of the
//                                                       first K ids (default ceil(n/2)), then one Decode
//                                                       step per remaining id
//
// FILE receives n*V raw little-endian f32 values, row-major. Exit status: 0 on success; 1 with one
// "niels-inspect: ..." line on stderr for a bad model directory (the loader's Status message), bad
// ids or an unwritable output; 2 for bad flags (CLI11).

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "daemon/model/kv_cache.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/loaders/model_loader.h"

namespace {

using niels::common::Status;
using niels::common::StatusOr;
using niels::daemon::model::KvCache;
using niels::daemon::loaders::Model;

// "5, 17,3" -> {5, 17, 3}; each id in [0, vocab_size); 1 <= n <= context.
StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, int64_t vocab_size, int64_t context) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos) {
      return Status::InvalidArgument("--logits: '" + item + "' is not an integer token id");
    }
    if (id < 0 || id >= vocab_size) {
      return Status::InvalidArgument("--logits: token id " + std::to_string(id) + " is outside [0, V=" +
                                     std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty() || static_cast<int64_t>(ids.size()) > context) {
    return Status::InvalidArgument("--logits: need 1.." + std::to_string(context) + " ids (T), got " +
                                   std::to_string(ids.size()));
  }
  return ids;
}

void PrintSummary(const Model& model) {
  const auto& c = model.config;
  const auto& weights = model.transformer->weights();
  int64_t parameters = 0;
  weights.ForEach([&](const std::string&, const niels::daemon::model::Tensor& tensor) { parameters += tensor.numel(); });
  const auto& special = model.special;
  std::cout << "model:      " << model.dir.string() << "\n"
            << "name:       " << (c.name.empty() ? "(none)" : c.name) << "\n"
            << "config:     V=" << c.vocab_size << " T=" << c.context << " C=" << c.width
            << " L=" << c.layers << " H=" << c.heads << " D=" << c.head_dim() << " d_ff=" << c.d_ff
            << " rope_theta=" << c.rope_theta << "\n"
            << "parameters: " << parameters << " (lm_head tied to tok_emb)\n"
            << "weights:    " << weights.bytes() << " bytes ("
            << static_cast<double>(weights.bytes()) / (1024.0 * 1024.0) << " MiB) in memory, matrices in "
            << niels::daemon::kernels::DtypeName(weights.dtype()) << "\n"
            << "tokenizer:  " << model.tokenizer->vocab_size() << " pieces; special ids sys="
            << special.sys << " usr=" << special.usr << " asst=" << special.asst
            << " eot=" << special.eot << "\n";
}

// Logits [n, V] for ids via the KV cache: Prefill(ids[0:k], all_logits) then Decode per id.
std::vector<float> PrefillDecodeLogits(const Model& model, const std::vector<int32_t>& ids, int64_t k) {
  const auto& transformer = *model.transformer;
  KvCache cache(model.config);
  std::span<const int32_t> all(ids);
  std::vector<float> logits = transformer.Prefill(all.subspan(0, k), cache, /*all_logits=*/true);  // [k, V]
  KvCache* caches[] = {&cache};
  for (size_t i = static_cast<size_t>(k); i < ids.size(); ++i) {
    const std::vector<float> row = transformer.Decode(all.subspan(i, 1), caches);  // [1, V]
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

Status WriteF32(const std::vector<float>& logits, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  out.close();
  if (!out) return Status::NotFound("--out: cannot write " + path);
  return Status::Ok();
}

struct Options {
  std::string model_dir;
  std::optional<std::string> ids;
  std::string out;
  bool prefill_decode = false;
  std::optional<int64_t> prefill;
  int threads = 1;
  std::string dtype = "file";
};

Status Run(const Options& options) {
  niels::daemon::loaders::LoadOptions load;
  if (options.dtype != "file") load.dtype = niels::daemon::kernels::ParseDtype(options.dtype);
  StatusOr<std::unique_ptr<Model>> loaded = niels::daemon::loaders::LoadModel(
      options.model_dir, std::make_shared<niels::daemon::kernels::WorkerPool>(options.threads), load);
  if (!loaded.ok()) return loaded.status();
  const Model& model = **loaded;
  if (!options.ids) {
    PrintSummary(model);
    return Status::Ok();
  }
  StatusOr<std::vector<int32_t>> ids = ParseIds(*options.ids, model.config.vocab_size, model.config.context);
  if (!ids.ok()) return ids.status();
  const auto n = static_cast<int64_t>(ids->size());
  std::vector<float> logits;
  if (options.prefill_decode) {
    int64_t k = options.prefill.value_or((n + 1) / 2);
    if (k < 1 || k > n) {
      return Status::InvalidArgument("--prefill: need 1.." + std::to_string(n) + ", got " + std::to_string(k));
    }
    logits = PrefillDecodeLogits(model, *ids, k);
  } else {
    logits = model.transformer->Forward(*ids);
  }
  if (static_cast<int64_t>(logits.size()) != n * model.config.vocab_size) {
    return Status::Internal("got " + std::to_string(logits.size()) + " logits, expected [" + std::to_string(n) +
                            ", " + std::to_string(model.config.vocab_size) + "]");
  }
  return WriteF32(logits, options.out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"niels-inspect: load a nielsd model directory; print a summary or write logits"};
  Options options;
  app.add_option("model_dir", options.model_dir, "model directory (config.json, model.safetensors, "
                 "tokenizer.model)")->required();
  auto* ids = app.add_option("--logits", options.ids, "comma-separated token ids: write their logits");
  app.add_option("--out", options.out, "file for the logits: n*V little-endian f32")->needs(ids);
  ids->needs(app.get_option("--out"));
  app.add_flag("--prefill-decode", options.prefill_decode,
               "compute the logits through Prefill + Decode steps instead of a full forward")->needs(ids);
  app.add_option("--prefill", options.prefill, "with --prefill-decode: ids to prefill (default ceil(n/2))")
      ->needs(ids);
  app.add_option("--threads", options.threads, "compute threads")->check(CLI::PositiveNumber);
  app.add_option("--dtype", options.dtype, "weights in memory: file (as stored), f32, f16 or bf16")
      ->check(CLI::IsMember({"file", "f32", "f16", "bf16"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Status status;
  try {
    status = Run(options);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (!status.ok()) {
    std::cerr << "niels-inspect: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
