#pragma once
// Session operations that need more than the SessionStore: a new session with its system prompt
// (encoded with the chat template and prefilled). Engine thread only. The other operations (get,
// list, fork, reset, delete) are SessionStore's and Session's own.

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "daemon/engine/engine_state.h"

namespace niels::daemon::engine {

// A new session owned by `uid`. With a system prompt, its [sys] text [eot] becomes the start of the
// history and is prefilled into the session's cache when the KV budget allows (otherwise the first
// request on the session prefills it). INVALID_ARGUMENT when the system prompt does not leave room
// in the model's context; RESOURCE_EXHAUSTED at a session limit (SessionStore::Create).
common::StatusOr<Session*> CreateSession(EngineState& state, uint32_t uid,
                                         const std::optional<std::string>& system_prompt);

}  // namespace niels::daemon::engine
