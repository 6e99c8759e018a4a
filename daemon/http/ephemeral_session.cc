#include "daemon/http/ephemeral_session.h"

#include "common/log.h"
#include "common/wire_status.h"

namespace niels::daemon::http {

boost::asio::awaitable<std::optional<ApiError>> EphemeralSession::Create(niels::v1::CreateSessionRequest request) {
  niels::v1::Request create;
  // Its one request follows at once and prefills the system prompt with the rest (taking the
  // caller's cached blocks): no prefill turn of its own, which would cost a scheduler round trip
  // and, for a prompt shorter than a block, a prefill the request then replaces.
  request.set_defer_prefill(true);
  *create.mutable_create_session() = std::move(request);
  niels::v1::Response response = co_await exchange_.Call(std::move(create));
  if (response.has_error()) co_return FromStatus(common::FromProto(response.error()));
  if (!response.has_create_session()) co_return MakeError(500, "CreateSession gave no session");
  id_ = response.create_session().session_id();
  co_return std::nullopt;
}

boost::asio::awaitable<void> EphemeralSession::Delete() {
  if (id_.empty()) co_return;
  niels::v1::Request request;
  request.mutable_delete_session()->set_session_id(id_);
  id_.clear();
  niels::v1::Response response = co_await exchange_.CallToEnd(std::move(request));
  if (response.has_error()) {
    static common::LogRateLimit limit("ephemeral sessions not deleted");
    common::LogWarnLimited(limit, "http: deleting a request's session failed: {}", response.error().message());
  }
}

}  // namespace niels::daemon::http
