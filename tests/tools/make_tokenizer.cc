// niels_make_test_tokenizer PATH: writes the tiny test tokenizer of tests/support
// (TrainTinyTokenizer: BPE, byte fallback, the four special tokens) to PATH and prints its vocabulary
// size on stdout, so script-driven tests (converter_roundtrip_test.py) can build a matching model.
//
// niels_make_test_tokenizer PATH --unigram CORPUS [--vocab-size N] [--no-byte-fallback]
//     [--normalization RULE] [--no-dummy-prefix] [--user-defined A,B,...]
// instead trains a SentencePiece UNIGRAM model on CORPUS (one sentence per line) with niels-train's
// settings (tools/train/spm_trainer.cc: the four special tokens as user_defined_symbols, byte
// fallback, full character coverage, split digits, one thread), the options changing one of them
// (export_gguf_test.py uses them to check what niels-export refuses).
// Exit status 0 on success, 1 with a message on stderr otherwise.

#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "daemon/text/sentencepiece_runtime.h"
#include "tests/support/test_model.h"

namespace {

struct Flags {
  std::string path;
  std::string corpus;  // --unigram
  int vocab_size = 1024;
  bool no_byte_fallback = false;
  std::string normalization = "nmt_nfkc";
  bool no_dummy_prefix = false;
  std::vector<std::string> user_defined;
};

// Feeds the corpus lines to the trainer without a temporary file.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return index_ >= lines_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return lines_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t index_ = 0;
};

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw std::runtime_error(path + ": no sentences");
  return lines;
}

// The serialized unigram ModelProto.
std::string TrainUnigram(const Flags& f) {
  std::vector<std::string> symbols = niels::testing::AllSpecialLiterals();
  symbols.insert(symbols.end(), f.user_defined.begin(), f.user_defined.end());
  std::string joined;
  for (const auto& s : symbols) joined += (joined.empty() ? "" : ",") + s;
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "unigram"},
      {"vocab_size", std::to_string(f.vocab_size)},
      {"user_defined_symbols", joined},
      {"byte_fallback", f.no_byte_fallback ? "false" : "true"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      {"num_threads", "1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "8192"},
      {"minloglevel", "2"},
      {"normalization_rule_name", f.normalization},
      {"add_dummy_prefix", f.no_dummy_prefix ? "false" : "true"},
  };
  const std::vector<std::string> lines = ReadLines(f.corpus);
  LineIterator it(lines);
  std::string proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  if (!status.ok()) throw std::runtime_error("training the unigram tokenizer failed: " + status.ToString());
  return proto;
}

int PieceCount(const std::string& proto) {
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(proto).ok()) throw std::runtime_error("the trained tokenizer does not load");
  return sp.GetPieceSize();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"niels_make_test_tokenizer: write a test SentencePiece model and print its vocabulary size"};
  app.add_option("path", f.path, "where tokenizer.model goes")->required();
  app.add_option("--unigram", f.corpus, "train a unigram model on this file's lines (one sentence each)");
  app.add_option("--vocab-size", f.vocab_size, "unigram: pieces")->capture_default_str();
  app.add_flag("--no-byte-fallback", f.no_byte_fallback, "unigram: byte_fallback=false");
  app.add_option("--normalization", f.normalization, "unigram: normalization_rule_name")->capture_default_str();
  app.add_flag("--no-dummy-prefix", f.no_dummy_prefix, "unigram: add_dummy_prefix=false");
  app.add_option("--user-defined", f.user_defined, "unigram: more user_defined_symbols")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    const std::filesystem::path path(f.path);
    if (f.corpus.empty()) {
      niels::testing::TrainTinyTokenizer(path);
      std::cout << niels::testing::TinyTokenizerVocabSize() << "\n";
      return 0;
    }
    if (auto s = niels::daemon::text::LoadSentencePieceRuntime(); !s.ok()) throw std::runtime_error(s.ToString());
    const std::string proto = TrainUnigram(f);
    std::ofstream out(path, std::ios::binary);
    out << proto;
    if (!out.flush()) throw std::runtime_error(f.path + ": cannot write");
    std::cout << PieceCount(proto) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "niels_make_test_tokenizer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
