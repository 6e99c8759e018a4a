#pragma once
// The training corpus: JSON Lines, one conversation per line,
//   {"system": "...", "turns": [{"user": "...", "assistant": "..."}, ...]}
// ("system" may be empty or absent), and its encoding with the token-native chat template.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/text/sentencepiece_tokenizer.h"

namespace niels::tools::train {

namespace text = ::niels::daemon::text;

struct Turn {
  std::string user;
  std::string assistant;
};

struct Conversation {
  std::string system;  // "" = no system message
  std::vector<Turn> turns;
};

// Reads every .jsonl file of `path` (a file, or a directory read in file-name order).
// NOT_FOUND when nothing can be read; INVALID_ARGUMENT naming the file and line for bad JSON or a
// conversation without turns.
common::StatusOr<std::vector<Conversation>> LoadCorpus(const std::filesystem::path& path);

// Every text of the corpus (system prompts, user and assistant texts), one per entry: the
// tokenizer's training sentences.
std::vector<std::string> CorpusSentences(const std::vector<Conversation>& corpus);

// One encoded conversation: the template's tokens and, per token, whether the model is trained to
// produce it (assistant reply content and its closing eot; never the system/user messages or [asst]).
struct Example {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;  // same length as tokens
};

// Encodes [sys]+system+[eot] (if any), then per turn [usr]+user+[eot] [asst]+reply+[eot], with
// text::EncodeMessage. Turns that would push the example past `max_tokens` are dropped (the
// example keeps the turns that fit; an example whose first turn does not fit is empty).
Example EncodeConversation(const text::SentencePieceTokenizer& tokenizer, const Conversation& conversation, int64_t max_tokens);

}  // namespace niels::tools::train
