#pragma once
// UTF-8 validation and repair for text that reaches a tokenizer.
//
// Repair replaces each maximal subpart of an ill-formed sequence with U+FFFD, the practice the
// Unicode Standard recommends (chapter 3, "U+FFFD Substitution of Maximal Subparts") and what a
// WHATWG TextDecoder and Python's bytes.decode("utf-8", errors="replace") do: a lead byte followed by
// fewer continuation bytes than it needs is one U+FFFD; a byte that cannot start or continue any
// well-formed sequence here (80..BF alone, C0, C1, F5..FF, or an E0/ED/F0/F4 lead whose next byte is
// outside its narrower range: overlongs, surrogates, above U+10FFFF) is one U+FFFD each.
// Pure functions, thread-safe.

#include <cstddef>
#include <string>
#include <string_view>

namespace niels::daemon::text {

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0 if none starts there.
// REQUIRES: pos < text.size().
size_t WellFormedSequenceLength(std::string_view text, size_t pos);

// Length of the longest prefix of `text` that is well-formed UTF-8.
size_t ValidUtf8PrefixLength(std::string_view text);

inline bool IsValidUtf8(std::string_view text) { return ValidUtf8PrefixLength(text) == text.size(); }

// `text` with every maximal ill-formed subpart replaced by U+FFFD (EF BF BD). Well-formed input
// comes back unchanged.
std::string RepairUtf8(std::string_view text);

}  // namespace niels::daemon::text
