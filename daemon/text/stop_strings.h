#pragma once
// StopStringScanner: finds the first of a request's stop strings in a growing text, byte by byte,
// and says how much of the text cannot be the start of one (what a stream may show now).
//
// Matching is on bytes (stop strings and text are UTF-8; a match never starts inside a character
// because stop strings begin with a whole character). "The first match" is the first to complete
// as the text grows; of several completing at the same byte, the one that starts first (the
// longest). After a match the scanner takes nothing more.
//
// Cost: one Knuth-Morris-Pratt automaton per stop string, so feeding a byte costs amortized O(S)
// for S stop strings, and held_back() is O(S); memory O(total stop-string bytes). Nothing
// rescans the text: a reply of n bytes costs O(n x S).
// Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace niels::daemon::text {

struct StopMatch {
  size_t index = 0;  // which stop string
  size_t start = 0;  // its first byte's offset in the text
};

class StopStringScanner {
 public:
  // REQUIRES: every stop string non-empty.
  explicit StopStringScanner(std::vector<std::string> stops);

  // Appends `bytes` to the text; returns the first match once one completes (then and on every
  // later call, which adds nothing).
  std::optional<StopMatch> Feed(std::string_view bytes);
  const std::optional<StopMatch>& match() const { return match_; }
  // Bytes fed so far (up to the end of the match, once there is one).
  size_t size() const { return size_; }
  // The length of the longest end of the text that is a proper prefix of a stop string: bytes a
  // stream must hold back until more text decides. 0 after a match.
  size_t held_back() const;
  const std::vector<std::string>& stops() const { return stops_; }
  // Automaton transitions taken so far (the work counted: at most 2 per fed byte and stop string).
  uint64_t steps() const { return steps_; }

 private:
  std::vector<std::string> stops_;
  std::vector<std::vector<uint32_t>> failure_;  // KMP: per stop, per prefix length
  std::vector<uint32_t> state_;                 // per stop: bytes of it the text now ends with
  std::optional<StopMatch> match_;
  size_t size_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace niels::daemon::text
