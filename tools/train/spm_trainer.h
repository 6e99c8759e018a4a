#pragma once
// Trains the SentencePiece tokenizer of a niels_gpt model with libsentencepiece's trainer.

#include <string>
#include <vector>

#include "common/status.h"

namespace niels::tools::train {

struct SpmOptions {
  int vocab_size = 1536;              // pieces, including the 256 byte pieces and the four specials
  std::string model_type = "bpe";     // "bpe" or "unigram"
};

// Trains on `sentences` (one text each) with the four special-token literals as user_defined_symbols,
// byte_fallback, full character coverage, one thread (deterministic), and returns the serialized
// ModelProto (the bytes of tokenizer.model). INVALID_ARGUMENT with the trainer's message on failure
// (e.g. a vocab size the corpus cannot reach).
common::StatusOr<std::string> TrainSentencePiece(const std::vector<std::string>& sentences, const SpmOptions& options);

}  // namespace niels::tools::train
