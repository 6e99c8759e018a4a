#pragma once
// Output of niels-chat replies on stdout: the whole reply at the end (the original CLI's output),
// or with --stream each token's text as it arrives. Only reply text goes to the stream given.
// A reasoning model's reasoning (ChatResponse.reasoning, TokenEvent.reasoning) comes before the
// answer, shown as ReasoningDisplay says, then a blank line.
// Not thread-safe; one per turn.

#include <ostream>
#include <string>
#include <string_view>

#include "niels/v1/nielsd.pb.h"

namespace niels::client {

// True when `text` is well-formed UTF-8 (protobuf string fields must be).
bool IsValidUtf8(std::string_view text);

// How a reply's reasoning is printed.
enum class ReasoningDisplay {
  kDim,     // in the terminal's faint style (SGR 2 ... SGR 22)
  kTagged,  // between "<think>\n" and "\n</think>" lines, as the model wrote it (output not a terminal)
  kHide,    // not at all (--hide-reasoning)
};

// --hide-reasoning hides; otherwise dimmed when stdout is a terminal and NO_COLOR is unset or
// empty (https://no-color.org), tagged when not.
ReasoningDisplay ChooseReasoningDisplay(bool hide_reasoning, bool stdout_is_terminal, const char* no_color);

class ReplyPrinter {
 public:
  ReplyPrinter(std::ostream& out, bool stream, ReasoningDisplay reasoning = ReasoningDisplay::kDim)
      : out_(out), stream_(stream), display_(reasoning) {}

  // Stream mode: writes the token's reasoning and answer text and flushes. Otherwise nothing.
  void OnToken(const niels::v1::TokenEvent& event);
  // The turn succeeded with `reply` (and `reasoning`): writes what was not streamed yet (all of it
  // without --stream) and a newline, then flushes.
  void Finish(const std::string& reply, const std::string& reasoning = "");
  // The turn failed or was cancelled: ends a partly streamed line (and the faint style) so the
  // next prompt starts clean.
  void Abort();

 private:
  void WriteReasoning(const std::string& text);
  void WriteAnswer(const std::string& text);
  void CloseReasoning();

  std::ostream& out_;
  bool stream_;
  ReasoningDisplay display_;
  bool in_reasoning_ = false;   // the reasoning block is open on `out_`
  std::string streamed_;            // answer text written while streaming
  std::string streamed_reasoning_;  // reasoning text received while streaming
};

}  // namespace niels::client
