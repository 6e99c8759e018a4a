#pragma once
// Output of niels-chat replies on stdout: the whole reply at the end (the original CLI's output),
// or with --stream each token's text as it arrives. Only reply text goes to the stream given.
// Not thread-safe; one per turn.

#include <ostream>
#include <string>
#include <string_view>

#include "niels/v1/nielsd.pb.h"

namespace niels::client {

// True when `text` is well-formed UTF-8 (protobuf string fields must be).
bool IsValidUtf8(std::string_view text);

class ReplyPrinter {
 public:
  ReplyPrinter(std::ostream& out, bool stream) : out_(out), stream_(stream) {}

  // Stream mode: writes the token's text and flushes. Otherwise nothing.
  void OnToken(const niels::v1::TokenEvent& event);
  // The turn succeeded with `reply`: writes what was not streamed yet (all of it without
  // --stream) and a newline, then flushes.
  void Finish(const std::string& reply);
  // The turn failed or was cancelled: ends a partly streamed line so the next prompt starts clean.
  void Abort();

 private:
  std::ostream& out_;
  bool stream_;
  std::string streamed_;
};

}  // namespace niels::client
