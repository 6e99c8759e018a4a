// niels-quantize: writes the quantized GGUF file of an f32/f16/bf16 GGUF model (llama, qwen2,
// qwen3) with llama.cpp's recipe for the file type (tools/quantize/README.md).
//
//   niels-quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|q5_k_m [--threads N] [--quiet]
//
// Prints one line per tensor (unless --quiet) and a summary: sizes, time, throughput. Exit status:
// 0 on success; 1 with one "niels-quantize: ..." line on stderr for a bad input or a failed write
// (OUT is then left as it was); CLI11's non-zero code for missing or malformed flags.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/status.h"
#include "tools/quantize/gguf_tensor_source.h"
#include "tools/quantize/quant_recipe.h"
#include "tools/quantize/quantizer.h"

namespace {

using niels::common::Status;
using niels::common::StatusOr;
namespace q = niels::tools::quantize;

struct Options {
  std::string input;
  std::string output;
  std::string type;
  int threads = 0;  // 0: one per core
  bool quiet = false;
};

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void PrintTensor(const q::TensorReport& r) {
  std::cout << fmt::format("[{:4}/{:4}] {:<40} {:>5} -> {:<5} {:9.2f} MiB -> {:9.2f} MiB\n", r.index + 1, r.count,
                           r.name, niels::daemon::formats::GgmlTypeName(r.from),
                           niels::daemon::formats::GgmlTypeName(r.to), MiB(r.bytes_in), MiB(r.bytes_out));
}

Status Run(const Options& options) {
  const std::optional<q::FileType> type = q::ParseFileType(options.type);
  if (!type) return Status::InvalidArgument("--type " + options.type + ": use q8_0, q4_0, q4_k_m or q5_k_m");
  std::error_code error;
  if (std::filesystem::is_directory(options.input, error)) {
    return Status::InvalidArgument(options.input + ": is a directory; niels-quantize reads a GGUF file (for a niels or "
                                   "Hugging Face model directory: niels-export DIR --format gguf OUT.gguf --quant " +
                                   options.type + ")");
  }
  StatusOr<std::unique_ptr<q::GgufTensorSource>> source = q::GgufTensorSource::Open(options.input);
  if (!source.ok()) return source.status();
  q::QuantizeOptions quantize;
  quantize.type = *type;
  quantize.threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  if (!options.quiet) quantize.on_tensor = PrintTensor;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<q::QuantizeResult> result = q::Quantize(**source, options.output, quantize);
  if (!result.ok()) return result.status();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("niels-quantize: {} -> {} ({}): tensors {:.2f} MiB -> {:.2f} MiB, file {:.2f} MiB, "
                           "{:.2f} s, {:.1f} MB/s read, {} threads\n",
                           options.input, options.output, q::FileTypeName(*type), MiB(result->bytes_in),
                           MiB(result->bytes_out), MiB(result->file_size), seconds,
                           static_cast<double>(result->bytes_in) / 1e6 / std::max(seconds, 1e-9), quantize.threads);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"niels-quantize: quantize an f32/f16/bf16 GGUF model (llama, qwen2, qwen3) as llama.cpp's "
               "llama-quantize does"};
  Options options;
  app.add_option("input", options.input, "the GGUF file to read")->required();
  app.add_option("output", options.output, "the quantized GGUF file to write (replaced when complete)")->required();
  app.add_option("--type", options.type, "file type: q8_0, q4_0, q4_k_m or q5_k_m")->required();
  app.add_option("--threads", options.threads, "threads quantizing (default: one per core)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--quiet", options.quiet, "print only the summary line");
  CLI11_PARSE(app, argc, argv);

  Status status;
  try {
    status = Run(options);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (!status.ok()) {
    std::cerr << "niels-quantize: " << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
