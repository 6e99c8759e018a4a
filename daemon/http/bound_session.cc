#include "daemon/http/bound_session.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "common/status.h"
#include "common/wire_status.h"

namespace niels::daemon::http {
namespace {

bool IsSessionId(std::string_view id) {
  return id.size() == 32 &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// At most this much of a refused value is quoted in an error.
std::string Quote(std::string_view value) {
  constexpr size_t kMostQuoted = 64;
  std::string out;
  for (const char c : value.substr(0, kMostQuoted)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (value.size() > kMostQuoted) out += "...";
  return out;
}

bool SameCalls(const niels::v1::ChatMessage& a, const niels::v1::ChatMessage& b) {
  if (a.tool_calls_size() != b.tool_calls_size()) return false;
  for (int i = 0; i < a.tool_calls_size(); ++i) {
    const niels::v1::ToolCall& x = a.tool_calls(i);
    const niels::v1::ToolCall& y = b.tool_calls(i);
    if (x.id() != y.id() || x.name() != y.name() || x.arguments() != y.arguments()) return false;
  }
  return true;
}

bool SameMessage(const niels::v1::ChatMessage& a, const niels::v1::ChatMessage& b) {
  return a.role() == b.role() && a.content() == b.content() && a.reasoning() == b.reasoning() &&
         a.tool_call_id() == b.tool_call_id() && a.name() == b.name() && SameCalls(a, b);
}

}  // namespace

std::optional<std::string> ReadBoundSession(FieldReader& fields, std::optional<std::string_view> header) {
  std::optional<std::string> field = fields.String(kSessionField);
  if (fields.failed()) return std::nullopt;
  if (field && !IsSessionId(*field)) {
    fields.Fail(kSessionField, fmt::format("'{}' is not a session id (32 lowercase hex digits, as CreateSession gives)",
                                           Quote(*field)));
    return std::nullopt;
  }
  if (header && !IsSessionId(*header)) {
    fields.Fail(kSessionHeader, fmt::format("'{}' is not a session id (32 lowercase hex digits, as CreateSession "
                                            "gives; one header)", Quote(*header)));
    return std::nullopt;
  }
  if (field && header && *field != *header) {
    fields.Fail(kSessionField, fmt::format("names session '{}' but the {} header names '{}': give one, or the same",
                                           *field, kSessionHeader, *header));
    return std::nullopt;
  }
  if (field) return field;
  if (header) return std::string(*header);
  return std::nullopt;
}

std::optional<ApiError> PlanOnSession(const niels::v1::GetSessionResponse& session,
                                      const niels::v1::CreateSessionRequest& create, const std::string& system_param,
                                      niels::v1::ChatRequest* chat) {
  std::optional<std::string> session_system;
  int first = 0;
  if (session.messages_size() > 0 && session.messages(0).role() == "system") {
    session_system = session.messages(0).content();
    first = 1;
  }
  if (create.has_system_prompt() && create.system_prompt() != session_system.value_or("")) {
    return BadField(system_param, fmt::format("{}: differs from the system prompt of session '{}' (a session's "
                                              "system prompt is set when it is created): send the same one, or none",
                                              system_param, session.session().session_id()));
  }
  std::vector<niels::v1::ChatMessage> conversation;
  if (!chat->user_text().empty()) {
    niels::v1::ChatMessage user;
    user.set_role("user");
    user.set_content(chat->user_text());
    conversation.push_back(std::move(user));
  } else {
    for (const niels::v1::ChatMessage& message : chat->messages()) conversation.push_back(message);
  }
  if (conversation.empty()) return BadField("messages", "messages: has no message to reply to");
  size_t same = 0;
  while (same < conversation.size() && first + static_cast<int>(same) < session.messages_size() &&
         SameMessage(conversation[same], session.messages(first + static_cast<int>(same)))) {
    ++same;
  }
  // Keep whole exchanges: back to a user message, and never the whole request (it is replied to).
  size_t keep = std::min(same, conversation.size() - 1);
  while (keep > 0 && conversation[keep].role() != "user") --keep;
  chat->clear_user_text();
  chat->clear_messages();
  chat->set_keep_messages(static_cast<int32_t>(keep));
  for (size_t i = keep; i < conversation.size(); ++i) *chat->add_messages() = std::move(conversation[i]);
  if (create.has_tools() && create.tools().tools_size() > 0) *chat->mutable_tools() = create.tools();
  return std::nullopt;
}

boost::asio::awaitable<std::optional<ApiError>> GetBoundSession(Exchange& exchange, const std::string& id,
                                                                niels::v1::GetSessionResponse* out) {
  niels::v1::Request request;
  request.mutable_get_session()->set_session_id(id);
  niels::v1::Response response = co_await exchange.Call(std::move(request));
  if (response.has_error()) {
    common::Status status = common::FromProto(response.error());
    // Another owner's session answers as one that does not exist.
    if (status.code() == common::StatusCode::kPermissionDenied || status.code() == common::StatusCode::kNotFound) {
      status = common::Status::NotFound(fmt::format("unknown session '{}'", id));
    }
    ApiError error = FromStatus(status);
    if (error.status == 404) {
      error.param = kSessionField;
      error.code = "session_not_found";
    }
    co_return error;
  }
  if (!response.has_get_session()) co_return MakeError(500, "GetSession gave no session");
  *out = std::move(*response.mutable_get_session());
  co_return std::nullopt;
}

}  // namespace niels::daemon::http
