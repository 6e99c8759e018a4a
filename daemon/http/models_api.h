#pragma once
// GET /health and GET /v1/models.
//   /health: 200 {"status": "ok"} once the model answers Info; 503 {"status": "shutting down"}
//   while nielsd stops (and the engine's error otherwise).
//   /v1/models: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by":
//   "nielsd", "context_length", "max_model_len"}]}: the loaded model (id: its name) -- the only one.

#include <boost/asio/awaitable.hpp>

#include "daemon/http/exchange.h"

namespace niels::daemon::http {

boost::asio::awaitable<void> HandleHealth(Exchange& exchange, bool shutting_down);
boost::asio::awaitable<void> HandleModels(Exchange& exchange);

}  // namespace niels::daemon::http
