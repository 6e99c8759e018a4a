#pragma once
// The token-native chat template (docs/ARCHITECTURE.md, "Tokenizer, chat template and sampling"): each message is
// [role id] + encode(content) + [eot]; a generation prompt is [asst].

#include <cstdint>
#include <string_view>
#include <vector>

#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

enum class Role { kSystem, kUser, kAssistant };

// [role] + tokenizer.Encode(content) + [eot]. Special literals in content stay plain text.
std::vector<int32_t> EncodeMessage(const text::Tokenizer& tokenizer, Role role, std::string_view content);

// The ids that open an assistant reply: [asst].
std::vector<int32_t> GenerationPrompt(const text::Tokenizer& tokenizer);

// Role ids banned during chat generation by default: sys, usr, asst.
std::vector<int32_t> DefaultBannedIds(const text::Tokenizer& tokenizer);

}  // namespace niels::daemon::text
