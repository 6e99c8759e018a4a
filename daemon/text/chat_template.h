#pragma once
// The token-native chat template (docs/ARCHITECTURE.md, "Tokenizers, chat templates, text and sampling"): each message is
// [role id] + encode(content) + [eot]; a generation prompt is [asst].

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::text {

// kTool: a tool's result (template formats; the token-native format has no marker for it).
enum class Role { kSystem, kUser, kAssistant, kTool };

// [role] + tokenizer.Encode(content) + [eot]. Special literals in content stay plain text.
// INVALID_ARGUMENT for Role::kTool (no marker).
common::StatusOr<std::vector<int32_t>> EncodeMessage(const Tokenizer& tokenizer, const SpecialTokens& special, Role role,
                                                     std::string_view content);

// The ids that open an assistant reply: [asst].
std::vector<int32_t> GenerationPrompt(const SpecialTokens& special);

// Role ids banned during chat generation by default: sys, usr, asst.
std::vector<int32_t> DefaultBannedIds(const SpecialTokens& special);

}  // namespace niels::daemon::text
