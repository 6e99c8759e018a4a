#include "client/chat/render.h"

namespace niels::client {

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t extra;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong 2-byte lead, or beyond U+10FFFF
    }
    if (i + extra >= text.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF))) return false;
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // UTF-16 surrogates
    i += extra + 1;
  }
  return true;
}

void ReplyPrinter::OnToken(const niels::v1::TokenEvent& event) {
  if (!stream_) return;
  out_ << event.text() << std::flush;
  streamed_ += event.text();
}

void ReplyPrinter::Finish(const std::string& reply) {
  if (stream_ && reply.starts_with(streamed_)) {
    out_ << reply.substr(streamed_.size());
  } else if (!stream_) {
    out_ << reply;
  }
  out_ << '\n' << std::flush;
  streamed_.clear();
}

void ReplyPrinter::Abort() {
  if (stream_ && !streamed_.empty()) out_ << '\n' << std::flush;
  streamed_.clear();
}

}  // namespace niels::client
