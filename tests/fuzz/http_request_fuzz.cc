// Fuzz target: the HTTP front's request parsing and mapping (daemon/http), everything a hostile
// client's bytes reach before the engine: Boost.Beast's request parser with the front's head and
// body limits (small here: 4 KiB head, 64 KiB body) fed in input-chosen pieces, then, for a
// complete request to one of the APIs, the body as JSON (ParseRequestBody) and its mapping onto
// native requests (MapChatCompletion, MapMessages, MapCompletion, MapTokenize, MapDetokenize), with
// the head's X-Nielsd-Session header; a chat bound to a session is also planned onto a session
// that holds the first part of its own conversation (PlanOnSession).
// The TCP listener's checks see the same bytes: the head's Host and Origin go through
// HostOriginRefusal, and the body is read as an --api-keys file (ApiKeys::Parse, then Find).
//
// Input: byte 0 seeds the split of the rest into pieces; the rest is the client's byte stream (one
// request).
// Invariants: the parser never holds a head over its limit or a body over its limit; a mapped
// request is either refused with an error (a 4xx status, a message, a body that is valid JSON) or
// accepted as native requests that are bounded by the body (serialized size at most 8x the body
// plus 4 KiB; a chat's n choices, at most kMaxChoices, are copies of it), with a chat that has exactly one of user_text and messages, max_new_tokens >= 1 and
// no empty role (an Anthropic error in Anthropic's shape, a tool message with its tool_call_id); an accepted completion has a prompt (text or ids) and never ids past the context.
// A bound session is a session id (32 lowercase hex digits), only with n = 1; planned onto a
// session, a chat keeps at most all but the last of its messages (keep_messages), sends the rest
// (at least one, starting with a user message when any are kept) and no user_text.
// A Host/Origin refusal is a bounded message; no Origin and a Host of localhost is taken. A key file
// is refused naming the file, or has a key, and a presented key finds at most its principal.
// Work is linear in the input (no engine, no model).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/anthropic_messages.h"
#include "daemon/http/api_error.h"
#include "daemon/http/api_keys.h"
#include "daemon/http/bound_session.h"
#include "daemon/http/loopback_access.h"
#include "daemon/http/json_fields.h"
#include "daemon/http/openai_chat.h"
#include "daemon/http/openai_completions.h"
#include "daemon/http/tokenize_api.h"
#include "tests/fuzz/fuzz_util.h"

namespace http = niels::daemon::http;
namespace bhttp = boost::beast::http;

namespace {

constexpr size_t kHeaderLimit = 4096;
constexpr size_t kBodyLimit = 64 * 1024;

void CheckError(const http::ApiError& error) {
  FUZZ_CHECK(error.status >= 400 && error.status < 500);
  FUZZ_CHECK(!error.message.empty());
  const nlohmann::json body = nlohmann::json::parse(http::ErrorBody(error), nullptr, false);
  FUZZ_CHECK(body.is_object() && body.contains("error"));
  if (error.shape == http::ErrorShape::kAnthropic) {
    FUZZ_CHECK(body["type"] == "error" && body["error"]["type"].is_string() && body["error"]["message"].is_string());
  }
}

void CheckBounded(const google::protobuf::Message& message, size_t body_bytes) {
  FUZZ_CHECK(message.ByteSizeLong() <= 8 * body_bytes + 4096);
}

void CheckSessionId(const std::optional<std::string>& session) {
  if (!session) return;
  FUZZ_CHECK(session->size() == 32);
  for (const char c : *session) FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
}

// Plans a bound chat onto a session holding the first `held` messages of its own conversation
// (and its system prompt): the plan keeps at most those, and sends the rest.
void CheckPlanOnSession(const niels::v1::CreateSessionRequest& create, const niels::v1::ChatRequest& mapped,
                        size_t held) {
  niels::v1::GetSessionResponse session;
  session.mutable_session()->set_session_id(std::string(32, 'a'));
  if (create.has_system_prompt()) {
    niels::v1::ChatMessage* system = session.add_messages();
    system->set_role("system");
    system->set_content(create.system_prompt());
  }
  const size_t total = mapped.user_text().empty() ? static_cast<size_t>(mapped.messages_size()) : 1;
  for (size_t i = 0; i < std::min(held, static_cast<size_t>(mapped.messages_size())); ++i) {
    *session.add_messages() = mapped.messages(static_cast<int>(i));
  }
  niels::v1::ChatRequest chat = mapped;
  if (std::optional<http::ApiError> error = http::PlanOnSession(session, create, "system", &chat)) {
    CheckError(*error);
    return;
  }
  FUZZ_CHECK(chat.user_text().empty() && chat.messages_size() >= 1);
  FUZZ_CHECK(chat.has_keep_messages() && chat.keep_messages() >= 0);
  FUZZ_CHECK(static_cast<size_t>(chat.keep_messages()) + static_cast<size_t>(chat.messages_size()) == total);
  FUZZ_CHECK(static_cast<size_t>(chat.keep_messages()) <= std::min(held, total - 1));
  if (chat.keep_messages() > 0) FUZZ_CHECK(chat.messages(0).role() == "user");
  // A session holding a different system prompt refuses the request, naming the field.
  if (create.has_system_prompt()) {
    session.mutable_messages(0)->set_content(create.system_prompt() + "!");
    niels::v1::ChatRequest other = mapped;
    std::optional<http::ApiError> error = http::PlanOnSession(session, create, "system", &other);
    FUZZ_CHECK(error.has_value() && error->param == "system");
  }
}

void MapBody(std::string_view target, const std::string& body, std::optional<std::string_view> session_header,
             size_t held) {
  nlohmann::json parsed;
  if (std::optional<http::ApiError> error = http::ParseRequestBody(body, &parsed)) {
    CheckError(*error);
    return;
  }
  const http::ModelView model{.id = "tiny", .context = 64, .reasoning = false};
  if (target == "/v1/chat/completions") {
    http::ChatPlan plan;
    if (std::optional<http::ApiError> error = http::MapChatCompletion(parsed, model, &plan, session_header)) {
      CheckError(*error);
      return;
    }
    CheckSessionId(plan.session);
    if (plan.session) {
      FUZZ_CHECK(plan.n == 1);
      CheckPlanOnSession(plan.create, plan.chat, held);
    }
    FUZZ_CHECK(plan.chat.user_text().empty() != (plan.chat.messages_size() == 0));
    FUZZ_CHECK(plan.chat.max_new_tokens() >= 1);
    FUZZ_CHECK(plan.n >= 1 && plan.n <= http::kMaxChoices);
    for (const niels::v1::ChatMessage& message : plan.chat.messages()) FUZZ_CHECK(!message.role().empty());
    CheckBounded(plan.chat, body.size());
    CheckBounded(plan.create, body.size());
  } else if (target == "/v1/messages") {
    http::MessagesPlan plan;
    if (std::optional<http::ApiError> error = http::MapMessages(parsed, model, &plan, session_header)) {
      FUZZ_CHECK(error->shape == http::ErrorShape::kAnthropic);
      CheckError(*error);
      return;
    }
    CheckSessionId(plan.session);
    if (plan.session) CheckPlanOnSession(plan.create, plan.chat, held);
    FUZZ_CHECK(plan.chat.user_text().empty() != (plan.chat.messages_size() == 0));
    FUZZ_CHECK(plan.chat.max_new_tokens() >= 1);
    for (const niels::v1::ChatMessage& message : plan.chat.messages()) {
      FUZZ_CHECK(!message.role().empty());
      FUZZ_CHECK(message.role() != "tool" || !message.tool_call_id().empty());
    }
    CheckBounded(plan.chat, body.size());
    CheckBounded(plan.create, body.size());
  } else if (target == "/v1/completions") {
    http::CompletionPlan plan;
    if (std::optional<http::ApiError> error = http::MapCompletion(parsed, model, &plan, session_header)) {
      CheckError(*error);
      return;
    }
    CheckSessionId(plan.session);
    FUZZ_CHECK(plan.prompt_text.has_value() || plan.generate.input_ids_size() < model.context);
    FUZZ_CHECK(!plan.prompt_text || plan.generate.input_ids_size() == 0);
    CheckBounded(plan.generate, body.size());
  } else if (target == "/tokenize") {
    niels::v1::TokenizeRequest request;
    if (std::optional<http::ApiError> error = http::MapTokenize(parsed, &request)) {
      CheckError(*error);
      return;
    }
    CheckBounded(request, body.size());
  } else if (target == "/detokenize") {
    niels::v1::DetokenizeRequest request;
    if (std::optional<http::ApiError> error = http::MapDetokenize(parsed, &request)) {
      CheckError(*error);
      return;
    }
    CheckBounded(request, body.size());
  }
}

}  // namespace

namespace {

std::optional<std::string_view> FieldOf(const bhttp::request<bhttp::string_body>& request, bhttp::field field) {
  auto it = request.find(field);
  if (it == request.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

std::optional<std::string_view> FieldOf(const bhttp::request<bhttp::string_body>& request, std::string_view name) {
  auto it = request.find(boost::beast::string_view(name.data(), name.size()));
  if (it == request.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

void CheckHostAndOrigin(const bhttp::request<bhttp::string_body>& request) {
  http::HostOriginRules rules;
  rules.allowed_hosts = {"nielsd.internal"};
  rules.allowed_origins = {"http://localhost:3000"};
  const std::optional<std::string_view> host = FieldOf(request, bhttp::field::host);
  const std::optional<std::string_view> origin = FieldOf(request, bhttp::field::origin);
  const std::optional<std::string> refusal = http::HostOriginRefusal(host, origin, rules);
  if (refusal) FUZZ_CHECK(!refusal->empty() && refusal->size() < 1024);
  FUZZ_CHECK(!http::HostOriginRefusal("localhost", std::nullopt, rules));
}

void CheckKeyFile(const std::string& body) {
  niels::common::StatusOr<http::ApiKeys> keys = http::ApiKeys::Parse(body, "fuzz");
  if (!keys.ok()) {
    FUZZ_CHECK(keys.status().message().find("--api-keys fuzz") != std::string::npos);
    return;
  }
  FUZZ_CHECK(keys->key_count() >= 1 && !keys->principals().empty());
  const http::ApiKeyPrincipal* found = keys->Find(body);
  FUZZ_CHECK(found == nullptr || (found >= keys->principals().data() &&
                                  found < keys->principals().data() + keys->principals().size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader reader(data, size);
  niels::fuzz::Rng rng(reader.U8());
  const std::string_view stream = reader.Rest();

  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(kHeaderLimit);
  parser.body_limit(kBodyLimit);
  std::string pending;
  boost::system::error_code ec;
  size_t fed = 0;
  bool failed = false;
  while (!parser.is_done() && !failed) {
    if (fed < stream.size()) {
      const size_t piece = static_cast<size_t>(rng.Between(1, 512));
      pending.append(stream.substr(fed, piece));
      fed += std::min(piece, stream.size() - fed);
    } else if (pending.empty() || ec == bhttp::error::need_more) {
      parser.put_eof(ec);
      break;
    }
    // Feed what is pending until the parser wants more bytes than there are.
    for (;;) {
      ec = {};
      const size_t used = parser.put(boost::asio::buffer(pending), ec);
      pending.erase(0, used);
      if (ec == bhttp::error::need_more) break;
      if (ec) {
        failed = true;
        break;
      }
      if (parser.is_done() || (used == 0 && pending.empty())) break;
      if (used == 0) break;
    }
    if (fed >= stream.size() && ec == bhttp::error::need_more && !parser.is_done()) {
      parser.put_eof(ec);
      break;
    }
  }
  if (parser.is_header_done()) {
    size_t head_bytes = 0;
    for (const auto& field : parser.get()) head_bytes += field.name_string().size() + field.value().size();
    FUZZ_CHECK(head_bytes <= kHeaderLimit);
    CheckHostAndOrigin(parser.get());
  }
  FUZZ_CHECK(parser.get().body().size() <= kBodyLimit);
  CheckKeyFile(parser.get().body());
  if (!parser.is_done() || failed) return 0;
  const bhttp::request<bhttp::string_body>& request = parser.get();
  if (request.method() != bhttp::verb::post) return 0;
  const std::string_view target(request.target().data(), request.target().size());
  std::optional<std::string_view> session_header = FieldOf(request, http::kSessionHeader);
  MapBody(target.substr(0, target.find('?')), request.body(), session_header, static_cast<size_t>(rng.Between(0, 8)));
  return 0;
}
