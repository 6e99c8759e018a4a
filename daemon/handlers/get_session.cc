// GetSession: one of the caller's sessions with its whole token history and its conversation as
// messages.
#include <algorithm>
#include <span>

#include "daemon/handlers/chat_messages.h"
#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

namespace {

void AddMessage(v1::GetSessionResponse& out, text::Role role, std::string content, std::string reasoning = "") {
  v1::ChatMessage& message = *out.add_messages();
  message.set_role(std::string(text::RoleName(role)));
  message.set_content(std::move(content));
  message.set_reasoning(std::move(reasoning));
}

// A token-native turn, [usr] text [eot] [asst] reply [eot], as its two messages (the reply's eot is
// missing while a turn is cut at the context limit).
void AddNativeTurn(const engine::EngineState& state, std::span<const int32_t> turn, v1::GetSessionResponse& out) {
  const text::SpecialTokens& special = state.special();
  const auto user_end = std::find(turn.begin(), turn.end(), special.eot);
  const auto user_begin = turn.empty() || turn.front() != special.usr ? turn.begin() : turn.begin() + 1;
  AddMessage(out, text::Role::kUser, state.tokenizer().Decode(std::span<const int32_t>(user_begin, user_end)));
  auto reply_begin = std::find(user_end, turn.end(), special.asst);
  if (reply_begin != turn.end()) ++reply_begin;
  const auto reply_end = std::find(reply_begin, turn.end(), special.eot);
  AddMessage(out, text::Role::kAssistant, state.tokenizer().Decode(std::span<const int32_t>(reply_begin, reply_end)));
}

}  // namespace

HandlerResult HandleGetSession(engine::EngineState& state, server::Job& job,
                               const v1::GetSessionRequest& request) {
  common::StatusOr<sessions::Session*> found = state.sessions.Find(request.session_id(), job.owner());
  if (!found.ok()) return found.status();
  const sessions::Session& session = **found;
  v1::Response response;
  v1::GetSessionResponse& result = *response.mutable_get_session();
  FillSessionInfo(sessions::ViewOf(session), *result.mutable_session());
  result.mutable_token_ids()->Add(session.tokens().begin(), session.tokens().end());
  if (session.has_system_prompt()) {
    std::string system = session.system_prompt_text();
    if (system.empty() && state.chat_format() != nullptr &&
        state.chat_format()->kind() != text::ChatFormat::Kind::kTemplate) {
      // A token-native system span, [sys] text [eot], written before its text was kept.
      const std::span<const int32_t> span(session.tokens().data(), static_cast<size_t>(session.system_end()));
      system = state.tokenizer().Decode(span);
    }
    AddMessage(result, text::Role::kSystem, std::move(system));
  }
  for (const sessions::TokenSpan& turn : session.turns()) {
    AddNativeTurn(state, std::span<const int32_t>(session.tokens()).subspan(
                             static_cast<size_t>(turn.begin), static_cast<size_t>(turn.end - turn.begin)),
                  result);
  }
  for (const text::ChatMessage& message : session.messages()) MessageToProto(message, *result.add_messages());
  return response;
}

}  // namespace niels::daemon::handlers
