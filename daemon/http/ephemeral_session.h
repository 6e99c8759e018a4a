#pragma once
// EphemeralSession: the session one stateless HTTP request runs on -- created for it (as the
// caller), deleted after it, whether it succeeded, failed or its client went away.
//
// Threading: the handler's coroutine (the connection's strand).

#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "daemon/http/exchange.h"

namespace niels::daemon::http {

class EphemeralSession {
 public:
  explicit EphemeralSession(Exchange& exchange) : exchange_(exchange) {}
  EphemeralSession(const EphemeralSession&) = delete;
  EphemeralSession& operator=(const EphemeralSession&) = delete;

  // CreateSession with defer_prefill (the request's own Chat/Generate prefills the system prompt);
  // the mapped error when it fails.
  boost::asio::awaitable<std::optional<ApiError>> Create(niels::v1::CreateSessionRequest request);
  const std::string& id() const { return id_; }
  // DeleteSession, not cancelled by a gone client. Idempotent; a no-op before Create succeeded.
  boost::asio::awaitable<void> Delete();

 private:
  Exchange& exchange_;
  std::string id_;
};

}  // namespace niels::daemon::http
