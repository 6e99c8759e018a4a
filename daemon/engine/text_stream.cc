#include "daemon/engine/text_stream.h"

namespace niels::daemon::engine {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the UTF-8 sequence a lead byte starts (1 for ASCII or a stray continuation byte).
size_t SequenceLength(unsigned char lead) {
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

std::string_view CompleteUtf8Prefix(std::string_view text) {
  // An incomplete sequence at the end: a lead byte within the last 3 bytes whose sequence runs past it.
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    if (SequenceLength(byte) > back) text.remove_suffix(back);
    break;
  }
  while (text.ends_with(kReplacementChar)) text.remove_suffix(kReplacementChar.size());
  return text;
}

std::string TextStream::Add(int32_t id, bool flush) {
  ids_.push_back(id);
  const std::string text = tokenizer_.Decode(ids_);
  const std::string_view ready = flush ? std::string_view(text) : CompleteUtf8Prefix(text);
  if (ready.size() <= sent_.size() || !ready.starts_with(sent_)) return {};
  std::string added(ready.substr(sent_.size()));
  sent_ = ready;
  return added;
}

}  // namespace niels::daemon::engine
