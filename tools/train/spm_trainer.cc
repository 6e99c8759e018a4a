#include "tools/train/spm_trainer.h"

#include <string_view>
#include <unordered_map>

#include <sentencepiece_trainer.h>

#include "daemon/text/sentencepiece_tokenizer.h"

namespace niels::tools::train {
namespace {

// Feeds the sentences to the trainer without a temporary file.
class VectorIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return index_ >= sentences_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return sentences_[index_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<std::string>& sentences_;
  size_t index_ = 0;
};

}  // namespace

common::StatusOr<std::string> TrainSentencePiece(const std::vector<std::string>& sentences, const SpmOptions& options) {
  using daemon::text::kAsstToken, daemon::text::kEotToken, daemon::text::kSysToken, daemon::text::kUsrToken;
  const std::string specials = std::string(kSysToken) + "," + std::string(kUsrToken) + "," +
                               std::string(kAsstToken) + "," + std::string(kEotToken);
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"user_defined_symbols", specials},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      {"num_threads", "1"},
      {"input_sentence_size", "0"},       // use every sentence: no random sampling
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "8192"},
      {"minloglevel", "2"},               // the trainer's own logging: errors only
  };
  VectorIterator iterator(sentences);
  std::string proto;
  sentencepiece::util::Status s = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &proto);
  if (!s.ok()) return common::Status::InvalidArgument("SentencePiece training failed: " + s.ToString());
  return proto;
}

}  // namespace niels::tools::train
