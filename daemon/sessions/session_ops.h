#pragma once
// Session operations that need more than the SessionRegistry: a new session with its system prompt
// (encoded with the chat template and prefilled). The other operations (get, list, fork, reset,
// delete) are SessionRegistry's and Session's own. Engine thread only.

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "daemon/model/language_model.h"
#include "daemon/sessions/session_registry.h"
#include "daemon/text/sentencepiece_tokenizer.h"
#include "daemon/text/tokenizer.h"

namespace niels::daemon::sessions {

// What CreateSession did.
struct CreatedSession {
  Session* session = nullptr;
  int64_t prefilled_tokens = 0;  // system-prompt positions computed (not found as shared blocks)
};

// A new session owned by `uid`. With a system prompt, its [sys] text [eot] becomes the start of the
// history and is prefilled into the session's cache with `model` when the KV pool has room (blocks
// of an equal prompt the pool holds for this user are shared instead; otherwise the first request
// on the session prefills it). INVALID_ARGUMENT when the system prompt does not leave room in the
// model's context; RESOURCE_EXHAUSTED at a session limit (SessionRegistry::Create).
common::StatusOr<CreatedSession> CreateSession(SessionRegistry& registry, const model::LanguageModel& model,
                                               const text::Tokenizer& tokenizer, const text::SpecialTokens& special, uint32_t uid,
                                               const std::optional<std::string>& system_prompt);

}  // namespace niels::daemon::sessions
