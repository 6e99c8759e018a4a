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

ReasoningDisplay ChooseReasoningDisplay(bool hide_reasoning, bool stdout_is_terminal, const char* no_color) {
  if (hide_reasoning) return ReasoningDisplay::kHide;
  const bool color = no_color == nullptr || *no_color == '\0';
  return stdout_is_terminal && color ? ReasoningDisplay::kDim : ReasoningDisplay::kTagged;
}

void ReplyPrinter::WriteReasoning(const std::string& text) {
  if (text.empty() || display_ == ReasoningDisplay::kHide) return;
  if (!in_reasoning_) {
    out_ << (display_ == ReasoningDisplay::kDim ? "\x1b[2m" : "<think>\n");
    in_reasoning_ = true;
  }
  out_ << text;
}

void ReplyPrinter::CloseReasoning() {
  if (!in_reasoning_) return;
  out_ << (display_ == ReasoningDisplay::kDim ? "\x1b[22m\n\n" : "\n</think>\n\n");
  in_reasoning_ = false;
}

void ReplyPrinter::WriteAnswer(const std::string& text) {
  if (text.empty()) return;
  CloseReasoning();
  out_ << text;
}

void ReplyPrinter::OnToken(const niels::v1::TokenEvent& event) {
  if (!stream_) return;
  WriteReasoning(event.reasoning());
  streamed_reasoning_ += event.reasoning();
  WriteAnswer(event.text());
  streamed_ += event.text();
  out_ << std::flush;
}

void ReplyPrinter::Finish(const std::string& reply, const std::string& reasoning) {
  if (!stream_) {
    WriteReasoning(reasoning);
    WriteAnswer(reply);
  } else {
    if (reasoning.starts_with(streamed_reasoning_)) WriteReasoning(reasoning.substr(streamed_reasoning_.size()));
    if (reply.starts_with(streamed_)) WriteAnswer(reply.substr(streamed_.size()));
  }
  if (in_reasoning_) {
    // A reply cut inside its reasoning: end the faint style (or the tag) on its own line.
    out_ << (display_ == ReasoningDisplay::kDim ? "\x1b[22m" : "\n</think>");
    in_reasoning_ = false;
  }
  out_ << '\n' << std::flush;
  streamed_.clear();
  streamed_reasoning_.clear();
}

void ReplyPrinter::Abort() {
  const bool partial = stream_ && (!streamed_.empty() || in_reasoning_);
  if (in_reasoning_ && display_ == ReasoningDisplay::kDim) out_ << "\x1b[22m";
  in_reasoning_ = false;
  if (partial) out_ << '\n' << std::flush;
  streamed_.clear();
  streamed_reasoning_.clear();
}

}  // namespace niels::client
