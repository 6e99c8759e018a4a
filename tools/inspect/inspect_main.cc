// niels-inspect: loads a model as nielsd does (LoadModel: a niels model directory, a Hugging Face
// directory or a GGUF file) and prints a summary of it, or writes the logits of token sequences or
// the ids of texts for comparison with another implementation (tests/tools uses this to check
// converted checkpoints against PyTorch and the Llama family against llama.cpp).
//
//   niels-inspect MODEL                                 summary: format, architecture, context, config,
//                                                       parameters, bytes, KV bytes per token, stop ids
//   niels-inspect MODEL --logits 5,17,3 --out FILE      full uncached forward, logits [n, V]; several
//                                                       sequences "5,17;4,2" run apart, rows appended
//   niels-inspect MODEL --logits 5,17,3 --out FILE --prefill-decode [--prefill K]
//                                                       the same logits via the KV cache: Prefill of the
//                                                       first K ids (default ceil(n/2)), then one Decode
//                                                       step per remaining id
//   niels-inspect MODEL --weight-stats 'model.layers.0.*' [--weight-stats NAME...] [--full]
//                                                       statistics of the tensors the names select (Hugging
//                                                       Face or GGUF names, * any run of characters), as
//                                                       the daemon's WeightStats computes them
//   niels-inspect MODEL --tokenize TEXTS.json --out FILE
//                                                       {"plain": [[ids]], "rendered": [[ids]]}: each text
//                                                       encoded as plain text and as rendered text
//                                                       (special-token text parsed)
//
// Logits: raw little-endian f32 values, row-major. Exit status: 0 on success; 1 with one
// "niels-inspect: ..." line on stderr for a bad model (the loader's Status message), bad ids or an
// unwritable output; 2 for bad flags (CLI11).

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
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "daemon/model/kv_cache.h"
#include "daemon/kernels/worker_pool.h"
#include "daemon/loaders/model_loader.h"
#include "tools/inspect/weight_stats_report.h"

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

std::string IdList(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

void PrintSummary(const Model& model) {
  namespace loaders = niels::daemon::loaders;
  using niels::daemon::kernels::Dtype;
  const auto& c = model.config;
  const auto& weights = model.transformer->weights();
  int64_t parameters = 0;
  weights.ForEach([&](const std::string& name, const niels::daemon::model::Tensor& tensor) {
    if (name != "lm_head" || !c.tied_embeddings) parameters += tensor.numel();
  });
  std::ostringstream rope;
  rope << "rope_theta=" << c.rope_theta;
  if (c.rope_scaling.type == niels::daemon::model::RopeScaling::Type::kLlama3) {
    rope << " rope_scaling=llama3(factor " << c.rope_scaling.factor << ")";
  }
  const auto& special = model.special;
  std::cout << "model:      " << model.dir.string() << "\n"
            << "format:     " << loaders::ModelFormatName(model.format) << "\n"
            << "name:       " << (c.name.empty() ? "(none)" : c.name) << "\n"
            << "arch:       " << niels::daemon::model::ArchitectureName(c.architecture) << "\n"
            << "config:     V=" << c.vocab_size << " T=" << c.context << " C=" << c.width << " L=" << c.layers
            << " H=" << c.heads << " KV=" << c.kv_head_count() << " D=" << c.head_dim() << " d_ff=" << c.d_ff
            << " " << rope.str() << (c.attention_bias ? " qkv_bias" : "") << (c.qk_norm ? " qk_norm" : "")
            << (c.qk_rows_interleaved ? " qk_rows_interleaved" : "") << "\n"
            << "context:    " << c.context << " of the model's " << model.model_context << "\n"
            << "parameters: " << parameters << (c.tied_embeddings ? " (lm_head tied to tok_emb)" : "") << "\n"
            << "weights:    " << weights.bytes() << " bytes (" << static_cast<double>(weights.bytes()) / (1024.0 * 1024.0)
            << " MiB) in memory, matrices in " << niels::daemon::kernels::DtypeName(weights.dtype()) << "; "
            << loaders::MappedWeightBytes(model) << " bytes used from the files' mappings\n"
            << "kv/token:   " << loaders::KvBytesPerToken(c, Dtype::kF32) << " bytes f32, "
            << loaders::KvBytesPerToken(c, Dtype::kF16) << " bytes f16\n"
            << "tokenizer:  " << model.tokenizer->vocab_size() << " ids; stop ids " << IdList(model.stop_ids)
            << "; bos " << (model.add_bos_id ? std::to_string(*model.add_bos_id) + " added to prompts" : "not added")
            << "\n"
            << "template:   "
            << (model.chat_template.empty() ? std::string("none (niels_gpt's token-native template)")
                                             : std::to_string(model.chat_template.size()) + " bytes of Jinja")
            << "\n";
  if (special.eot >= 0) {
    std::cout << "markers:    sys=" << special.sys << " usr=" << special.usr << " asst=" << special.asst
              << " eot=" << special.eot << "\n";
  }
}

// --tokenize: a JSON list of texts -> {"plain": [[ids]], "rendered": [[ids]]} (Encode: special-token
// text as text; EncodeRendered: special-token text as its ids).
Status Tokenize(const Model& model, const std::string& in_path, const std::string& out_path) {
  std::ifstream in(in_path, std::ios::binary);
  if (!in) return Status::NotFound("--tokenize: cannot read " + in_path);
  const nlohmann::json texts = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!texts.is_array()) return Status::InvalidArgument("--tokenize: " + in_path + " is not a JSON list of strings");
  nlohmann::json plain = nlohmann::json::array(), rendered = nlohmann::json::array();
  for (const auto& text : texts) {
    if (!text.is_string()) return Status::InvalidArgument("--tokenize: " + in_path + " holds a non-string");
    auto a = model.tokenizer->Encode(text.get<std::string>());
    if (!a.ok()) return a.status();
    auto b = model.tokenizer->EncodeRendered(text.get<std::string>());
    if (!b.ok()) return b.status();
    plain.push_back(*a);
    rendered.push_back(*b);
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out << nlohmann::json{{"plain", plain}, {"rendered", rendered}}.dump();
  out.close();
  if (!out) return Status::NotFound("--out: cannot write " + out_path);
  return Status::Ok();
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
  std::optional<std::string> tokenize;
  std::string out;
  bool prefill_decode = false;
  std::optional<int64_t> prefill;
  int threads = 1;
  std::string dtype = "file";
  std::vector<std::string> weight_stats;
  bool full = false;
};

Status Run(const Options& options) {
  niels::daemon::loaders::LoadOptions load;
  if (options.dtype != "file") load.dtype = niels::daemon::kernels::ParseDtype(options.dtype);
  StatusOr<std::unique_ptr<Model>> loaded = niels::daemon::loaders::LoadModel(
      options.model_dir, std::make_shared<niels::daemon::kernels::WorkerPool>(options.threads), load);
  if (!loaded.ok()) return loaded.status();
  const Model& model = **loaded;
  if (options.tokenize) return Tokenize(model, *options.tokenize, options.out);
  if (!options.weight_stats.empty()) {
    return niels::tools::PrintWeightStats(model, options.weight_stats, options.full, std::cout);
  }
  if (!options.ids) {
    PrintSummary(model);
    return Status::Ok();
  }
  // Sequences separated by ';', each run on its own; their logits are written one after another.
  std::vector<float> logits;
  std::stringstream sequences(*options.ids);
  std::string sequence;
  while (std::getline(sequences, sequence, ';')) {
    StatusOr<std::vector<int32_t>> ids = ParseIds(sequence, model.config.vocab_size, model.config.context);
    if (!ids.ok()) return ids.status();
    const auto n = static_cast<int64_t>(ids->size());
    std::vector<float> rows;
    if (options.prefill_decode) {
      int64_t k = options.prefill.value_or((n + 1) / 2);
      if (k < 1 || k > n) {
        return Status::InvalidArgument("--prefill: need 1.." + std::to_string(n) + ", got " + std::to_string(k));
      }
      rows = PrefillDecodeLogits(model, *ids, k);
    } else {
      rows = model.transformer->Forward(*ids);
    }
    if (static_cast<int64_t>(rows.size()) != n * model.config.vocab_size) {
      return Status::Internal("got " + std::to_string(rows.size()) + " logits, expected [" + std::to_string(n) +
                              ", " + std::to_string(model.config.vocab_size) + "]");
    }
    logits.insert(logits.end(), rows.begin(), rows.end());
  }
  return WriteF32(logits, options.out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"niels-inspect: load a model as nielsd does; print a summary or weight statistics, write logits or "
               "token ids"};
  Options options;
  app.add_option("model", options.model_dir, "the model: a niels model directory, a Hugging Face directory or "
                 "a GGUF file")->required();
  auto* ids = app.add_option("--logits", options.ids, "comma-separated token ids: write their logits");
  auto* tokenize = app.add_option("--tokenize", options.tokenize,
                                  "a JSON file with a list of texts: write their ids (plain and with special-token "
                                  "text parsed) as JSON")->excludes(ids);
  auto* weight_stats = app.add_option("--weight-stats", options.weight_stats,
                                      "a tensor name or pattern (Hugging Face or GGUF names, * any run of "
                                      "characters; repeatable): print its statistics")
                           ->excludes(ids)
                           ->excludes(tokenize);
  app.add_flag("--full", options.full, "with --weight-stats: the full statistics")->needs(weight_stats);
  auto* out = app.add_option("--out", options.out, "file for the logits (n*V little-endian f32) or the ids");
  ids->needs(out);
  tokenize->needs(out);
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
