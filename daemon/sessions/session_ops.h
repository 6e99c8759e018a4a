#pragma once
// Session operations that need more than the SessionRegistry: a new session with its system prompt
// (encoded with the chat format). The other operations (get, list, fork, reset,
// delete) are SessionRegistry's and Session's own. Engine thread only.

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "daemon/model/language_model.h"
#include "daemon/sessions/session_registry.h"
#include "daemon/text/chat_format.h"

namespace niels::daemon::sessions {

// What CreateSession did.
struct CreatedSession {
  Session* session = nullptr;
};

// A new session owned by `owner`. With a system prompt, what every conversation of the session
// starts with (ChatFormat::SessionStart: niels_gpt's [sys] text [eot]; with a Jinja template the
// rendering up to the first user message) becomes the start of the history; nothing is prefilled
// here (the caller runs the prefill as a turn of the engine's scheduler, in chunks between other
// sessions' steps: handlers/create_session.cc; else the first request on the session prefills it).
// Without one the session starts empty (length 0), whatever the chat format: a Chat turn renders
// the template's start itself, and a raw Generate sees only the ids its caller sends. `format` is
// null for a model without a chat format (a system prompt is then refused). INVALID_ARGUMENT when
// that start does not leave room in the model's context or the template refuses it;
// RESOURCE_EXHAUSTED at a session limit (SessionRegistry::Create) or a renderer limit.
common::StatusOr<CreatedSession> CreateSession(SessionRegistry& registry, const model::LanguageModel& model,
                                               const text::ChatFormat* format, common::OwnerId owner,
                                               const std::optional<std::string>& system_prompt);

}  // namespace niels::daemon::sessions
