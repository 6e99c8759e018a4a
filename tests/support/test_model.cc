#include "tests/support/test_model.h"

#include <stdlib.h>

#include <array>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "daemon/text/sentencepiece_runtime.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/model/weights.h"

namespace niels::testing {
namespace {

namespace fs = std::filesystem;
using daemon::model::ModelConfig;

// Feeds the built-in corpus to the trainer.
class CorpusIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CorpusIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return index_ >= lines_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return lines_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t index_ = 0;
};

std::string JoinComma(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += ",";
    s += items[i];
  }
  return s;
}

std::string Train(const TinyTokenizerOptions& options) {
  const auto symbols = options.user_defined_symbols.value_or(AllSpecialLiterals());
  std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"hard_vocab_limit", "true"},
      {"split_digits", "true"},
      {"shuffle_input_sentence", "false"},
      {"input_sentence_size", "0"},
      {"seed_sentencepiece_size", "100000"},
      {"normalization_rule_name", options.normalization},
  };
  if (!symbols.empty()) args["user_defined_symbols"] = JoinComma(symbols);
  if (auto s = daemon::text::LoadSentencePieceRuntime(); !s.ok()) throw std::runtime_error(s.ToString());
  CorpusIterator it(TinyCorpus());
  std::string proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  if (!status.ok()) throw std::runtime_error("training the tiny tokenizer failed: " + status.ToString());
  return proto;
}

// Trained models, keyed by options; training takes about a second, so do it once per process.
const std::string& CachedModel(const TinyTokenizerOptions& options) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::string>();  // never destroyed (no static dtor)
  std::string key = std::to_string(options.vocab_size) + "|" + options.normalization;
  if (options.user_defined_symbols) {
    key += "|custom|";
    key += JoinComma(*options.user_defined_symbols);
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, Train(options)).first;
  return it->second;
}

}  // namespace

std::vector<std::string> AllSpecialLiterals() {
  using namespace daemon::text;
  return {std::string(kSysToken), std::string(kUsrToken), std::string(kAsstToken), std::string(kEotToken)};
}

const std::vector<std::string>& TinyCorpus() {
  static const auto* corpus = new std::vector<std::string>{
      "nielsd is a local inference daemon for a small language model.",
      "It loads the model once and keeps one cache per chat session.",
      "You can chat with the daemon using the niels-chat command.",
      "Every turn after the first only pays for the new tokens.",
      "The daemon listens on a Unix socket in your runtime directory.",
      "Requests and responses are protobuf messages with a length prefix.",
      "Niels likes to write small programs that run on his own machine.",
      "The tokenizer splits text into pieces, and pieces into ids.",
      "Hello there! How are you today? I am fine, thank you.",
      "What is the weather like in Copenhagen this morning?",
      "The quick brown fox jumps over the lazy dog.",
      "A session holds its owner, its token history and a key value cache.",
      "When the context is full, the oldest turns are dropped.",
      "Sampling uses temperature, top k and top p with a fixed seed.",
      "Greedy decoding always picks the most likely next token.",
      "Start nielsd once, then chat with it as often as you like.",
      "The model has layers, heads, a width and a vocabulary size.",
      "Each layer applies attention and then a small feed forward network.",
      "Rotary position embeddings rotate pairs of query and key values.",
      "If you don't know the answer, say that you don't know.",
      "Niels lives in Denmark and works on software for fun.",
      "This is a tiny chatbot on Niels' website; it answers in third person.",
      "Numbers like 12, 345 and 2026 are split into single digits.",
      "Please type your question and press enter to send it.",
      "The server answers every request with the same request id.",
      "Cancel a reply with Ctrl-C; the session stays as it was.",
      "Logs go to standard error with syslog priority prefixes.",
      "Tests run in temporary directories and never touch your home.",
      "The weights are stored in a safetensors file next to the config.",
      "Memory grows with the tokens actually cached, not with the limit.",
      "Good morning, good evening, good night, see you soon!",
      "user: what does nielsd do? assistant: it serves a small model.",
      "system: you are a helpful assistant that answers briefly.",
      "Many sessions can decode together in one batched step.",
      "Why is the sky blue? Because air scatters blue light the most.",
      "She said: \"Let's go to the beach (if it doesn't rain).\"",
  };
  return *corpus;
}

void TrainTinyTokenizer(const fs::path& file, int vocab_size) {
  TinyTokenizerOptions options;
  options.vocab_size = vocab_size;
  TrainTinyTokenizer(file, options);
}

void TrainTinyTokenizer(const fs::path& file, const TinyTokenizerOptions& options) {
  WriteFile(file, CachedModel(options));
}

const std::string& TinyTokenizerProto() { return CachedModel(TinyTokenizerOptions{}); }

int32_t TinyTokenizerVocabSize() {
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(TinyTokenizerProto()).ok()) {
    throw std::runtime_error("the tiny tokenizer does not load");
  }
  return sp.GetPieceSize();
}

ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = TinyTokenizerVocabSize();
  c.context = 64;
  c.width = 32;
  c.layers = 2;
  c.heads = 4;
  c.d_ff = 64;
  c.rope_theta = 10000.0;
  c.name = "tiny";
  return c;
}

void WriteModelDir(const fs::path& dir, const ModelConfig& config, uint64_t seed) {
  fs::create_directories(dir);
  ModelConfig c = config;
  c.vocab_size = TinyTokenizerVocabSize();
  WriteFile(dir / "config.json", daemon::model::ModelConfigToJson(c));
  WriteFile(dir / "tokenizer.model", TinyTokenizerProto());
  auto status = daemon::loaders::SaveNielsWeights(daemon::model::RandomWeights(c, seed), dir / "model.safetensors");
  if (!status.ok()) throw std::runtime_error("WriteModelDir: " + status.ToString());
}

std::vector<int32_t> EncodeText(const daemon::text::Tokenizer& tokenizer, std::string_view text) {
  common::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  if (!ids.ok()) throw std::runtime_error("EncodeText: " + ids.status().ToString());
  return std::move(*ids);
}

}  // namespace niels::testing
