#include "daemon/text/text_stream.h"

#include <algorithm>

namespace niels::daemon::text {
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
  window_.push_back(id);
  const std::string decoded = tokenizer_.Decode(window_);
  // The text after the anchor. Everything up to and including the anchor was handed out whole and
  // ends in a complete character that is not U+FFFD, so holding back an incomplete end of the
  // whole text is holding back that of `after`.
  const std::string_view after = std::string_view(decoded).substr(std::min(anchor_bytes_, decoded.size()));
  const std::string_view ready = flush ? after : CompleteUtf8Prefix(after);
  std::string added;
  if (ready.size() > window_sent_.size() && ready.starts_with(window_sent_)) {
    added = ready.substr(window_sent_.size());
    window_sent_ = ready;
    sent_ += added;
  }
  // A new anchor: everything is out, and `id` leaves the decoder without partial bytes.
  if (window_sent_ == after && tokenizer_.IsTextPiece(id)) {
    const std::string alone = tokenizer_.Decode({&id, 1});
    if (!alone.empty()) {
      window_.assign(1, id);
      anchor_bytes_ = alone.size();
      window_sent_.clear();
    }
  }
  return added;
}

}  // namespace niels::daemon::text
