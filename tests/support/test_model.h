#pragma once
// Test helpers that need the model side (niels_test_support, linked with niels_model): a tiny
// trained SentencePiece tokenizer with the four special tokens, a tiny model config and complete
// random-weight model directories. The torch-free file helpers (temp dirs, raw writers) are in
// temp_files.h (niels_test_base), included here for convenience.
//
// No libtorch in this header (suites that only need a model directory stay cheap to compile); to
// write tensors directly use daemon/formats/safetensors.h (WriteSafetensors).
//
// Failures inside these helpers throw std::runtime_error, which GoogleTest reports as a test
// failure. Thread-safe: the trained tokenizer cache is guarded by a mutex.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/text/tokenizer.h"
#include "tests/support/temp_files.h"

namespace niels::testing {

// The four special-token literals (sys, usr, asst, eot), as user_defined_symbols by default.
std::vector<std::string> AllSpecialLiterals();

struct TinyTokenizerOptions {
  int vocab_size = 400;
  // Symbols added as user_defined_symbols (single pieces). Default: AllSpecialLiterals().
  std::optional<std::vector<std::string>> user_defined_symbols;
  // SentencePiece's normalization_rule_name. "identity" leaves out the ~240 KB NFKC character map
  // that the default rule stores in the model (a much smaller tokenizer.model, e.g. for fuzzing).
  std::string normalization = "nmt_nfkc";
};

// Trains (once per process per options, then cached) a small BPE SentencePiece model on a built-in
// English corpus, byte_fallback on, deterministic, and writes it to `file` (e.g. dir/"tokenizer.model").
void TrainTinyTokenizer(const std::filesystem::path& file, int vocab_size = 400);
void TrainTinyTokenizer(const std::filesystem::path& file, const TinyTokenizerOptions& options);

// The serialized model proto of the default tiny tokenizer (TrainTinyTokenizer(file)).
const std::string& TinyTokenizerProto();
// Its vocabulary size (the number of pieces).
int32_t TinyTokenizerVocabSize();
// The sentences the tiny tokenizer was trained on (good inputs for Encode/Decode tests).
const std::vector<std::string>& TinyCorpus();

// V = TinyTokenizerVocabSize(), T 64, C 32, L 2, H 4, d_ff 64, rope_theta 10000, name "tiny".
daemon::model::ModelConfig TinyConfig();

// tokenizer.Encode(text), the ids; throws when it fails (tests encode only text that must encode).
std::vector<int32_t> EncodeText(const daemon::text::Tokenizer& tokenizer, std::string_view text);

// Writes a complete, valid model directory (creating `dir` if needed): config.json (with V set to
// the tiny tokenizer's vocab size), model.safetensors (RandomWeights(config, seed), f32) and
// tokenizer.model (the default tiny tokenizer).
void WriteModelDir(const std::filesystem::path& dir, const daemon::model::ModelConfig& config,
                   uint64_t seed);

}  // namespace niels::testing
