#pragma once
// The defaults of the original chat CLI and of the protocol, defined once for nielsd, niels-chat,
// the client library, the tools and the benchmarks (docs/ARCHITECTURE.md, "Tokenizer, chat template
// and sampling"). A request field left unset takes these values in nielsd; niels-chat's flags start
// from them. The Python package leaves unset fields unset, so nielsd's values apply there too.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace niels::common {

// New tokens a Chat or Generate may produce when the request does not say.
inline constexpr int32_t kDefaultMaxNewTokens = 256;

// Sampling (the original CLI's): temperature 0.9, top-k 50, top-p off, repetition penalty off,
// seed 42.
inline constexpr float kDefaultTemperature = 0.9f;
inline constexpr int32_t kDefaultTopK = 50;
inline constexpr float kDefaultTopP = 0.0f;               // 0 = off
inline constexpr float kDefaultRepetitionPenalty = 1.0f;  // 1 = off
inline constexpr uint64_t kDefaultSeed = 42;

// The original CLI's system prompt (note the typographic apostrophes, U+2019).
inline constexpr std::string_view kDefaultSystemPrompt =
    "you are a tiny chatbot on niels\u2019 website. answer in third person about niels. do not invent "
    "personal facts; if you don\u2019t know, say you don\u2019t know.";

// The largest request frame nielsd reads unless --max-frame-bytes says otherwise (4 MiB), and the
// largest response it sends (64 MiB).
inline constexpr size_t kDefaultMaxFrameBytes = 4u << 20;
inline constexpr size_t kMaxResponseBytes = 64u << 20;

}  // namespace niels::common
