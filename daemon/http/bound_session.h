#pragma once
// Binding an HTTP request to a durable nielsd session (docs/HTTP.md "Requests on a session"):
// the body field `nielsd_session` or the header `X-Nielsd-Session` names a session of the caller
// (one made with CreateSession on the protobuf socket, or by niels-chat), and the request runs on
// it instead of on an ephemeral session; nothing is created or deleted.
//
// Chat (/v1/chat/completions, /v1/messages): the request's conversation replaces the session's.
// The longest run of leading messages the session already holds (role, content, reasoning, tool
// calls, tool_call_id and name all equal) is kept, cut back to the last user message at or before
// it (whole turns on the token-native format), and the rest is appended as ChatRequest.messages
// with keep_messages set to what is kept: the session's keys/values of the kept messages are
// reused, and a template model reuses the rest of its rendering up to its first differing token.
// So turn N of a conversation re-sent whole costs its new tokens, and a request that changes an
// earlier message (edit, regenerate) rewrites the session from there. The session's system prompt
// is its own: a request's system prompt must be the same text (or absent). A request's tools
// replace the session's (ChatRequest.tools); without tools the session keeps its own.
//
// Completions (/v1/completions): the session's tokens are the prefix; the prompt is appended to
// them and continued (Generate's semantics), the completion kept in the session.
//
// A session that does not exist and one of another owner are the same 404 (the caller learns
// nothing of others' sessions).
//
// ReadBoundSession and PlanOnSession are pure (fuzzed with the mapping); GetBoundSession runs on
// the handler's coroutine.

#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "daemon/http/exchange.h"
#include "daemon/http/json_fields.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::http {

inline constexpr const char* kSessionField = "nielsd_session";
inline constexpr const char* kSessionHeader = "X-Nielsd-Session";

// The session a request is bound to: the body's `nielsd_session` (a string) and the header's value
// (`header`, nullopt when absent; repeated headers arrive joined by ", "). Each must be a session
// id (32 lowercase hex digits, as CreateSession makes them); when both are given they must be the
// same. Errors (recorded in the reader's error): 400 naming `nielsd_session` or the header.
std::optional<std::string> ReadBoundSession(FieldReader& fields, std::optional<std::string_view> header);

// Rewrites a chat plan's native requests for a run on `session` (GetSession's answer): the
// conversation (chat->user_text or chat->messages) becomes keep_messages and the messages after
// it (above), create.tools go to chat->tools. A system prompt in `create` that is not the
// session's is a 400 naming `system_param`.
std::optional<ApiError> PlanOnSession(const niels::v1::GetSessionResponse& session,
                                      const niels::v1::CreateSessionRequest& create, const std::string& system_param,
                                      niels::v1::ChatRequest* chat);

// GetSession of `id` as the caller. A session of another owner is the NOT_FOUND of one that does not
// exist ("unknown session '<id>'"), mapped like every status (FromStatus), with param
// `nielsd_session`.
boost::asio::awaitable<std::optional<ApiError>> GetBoundSession(Exchange& exchange, const std::string& id,
                                                                niels::v1::GetSessionResponse* out);

}  // namespace niels::daemon::http
