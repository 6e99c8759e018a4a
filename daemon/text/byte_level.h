#pragma once
// The byte-level alphabet of GPT-2-style BPE (Hugging Face's ByteLevel pre-tokenizer and decoder):
// each of the 256 byte values is spelled as one printable code point, so that a vocabulary of
// byte strings can be written as text. Bytes that are printable Latin-1 ('!'..'~', U+00A1..U+00AC,
// U+00AE..U+00FF) stand for themselves; the other 68 bytes, in increasing order, become U+0100,
// U+0101, ... U+0143 (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). Pure functions, thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace niels::daemon::text {

// The code point that spells byte `b`.
char32_t ByteToCodePoint(uint8_t b);

// The byte a code point spells, or nullopt if it is not in the alphabet.
std::optional<uint8_t> CodePointToByte(char32_t c);

// Appends the byte-level spelling (UTF-8) of raw bytes `bytes` to *out.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Appends the raw bytes a byte-level string spells to *out and returns true; returns false and
// leaves *out as it was if `piece` holds a code point outside the alphabet (or is not UTF-8).
bool AppendDecodedByteLevel(std::string_view piece, std::string* out);

// The raw bytes a byte-level string spells, or nullopt (as above).
std::optional<std::string> DecodeByteLevel(std::string_view piece);

}  // namespace niels::daemon::text
