#pragma once
// Dispatcher: maps one decoded Request of a connection to its handling.
//   - Cancel is connection-local: it sets the target request's cancel flag and answers
//     CancelResponse{found} at once (found = the target was still in flight on this connection).
//   - A Request with no kind set (or a kind this build's proto does not know): UNIMPLEMENTED.
//   - A request_id already in flight on the same connection: INVALID_ARGUMENT.
//   - Everything else becomes an engine Job (caller uid, request, cancel flag, sink); the engine
//     answers it. Stats responses get the live connection count filled in here.
// Status -> wire conversion happens here (common::ToProto) for the errors the server itself answers.
//
// Threading: Dispatch() runs on the calling connection's strand; the dispatcher itself holds no
// mutable state, so one instance serves every connection.

#include "daemon/engine/inference_engine.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

class Connection;
class ConnectionRegistry;

class Dispatcher {
 public:
  /// `engine` and `registry` must outlive the dispatcher.
  Dispatcher(engine::InferenceEngine& engine, const ConnectionRegistry& registry);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  /// Handles one request of `connection`. REQUIRES: on `connection`'s strand.
  void Dispatch(Connection& connection, niels::v1::Request request);

 private:
  engine::InferenceEngine& engine_;
  const ConnectionRegistry& registry_;
};

}  // namespace niels::daemon::server
