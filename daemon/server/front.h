#pragma once
// Front: another way into the same RequestService beside the protobuf socket (nielsd's HTTP front,
// daemon/http). The Daemon runs every front it was given on its io_context and shuts it down with
// the protobuf socket, so all of nielsd's listeners stop, drain and close in one order.
//
// Threading: Start() and the shutdown methods are called by the Daemon from its main thread;
// connection_count() from any thread.

#include <cstddef>

#include "daemon/server/request_service.h"

namespace niels::daemon::server {

class Front {
 public:
  virtual ~Front() = default;
  // Starts accepting (the Daemon's IO threads run it). `service` outlives the front's connections.
  virtual void Start(RequestService& service) = 0;
  // Stops accepting and removes the socket file; from now on new requests are refused as shutting
  // down. Returns when the acceptor is closed.
  virtual void StopAccepting() = 0;
  // Asks every connection to finish the response it is writing and close.
  virtual void DrainAll() = 0;
  // Closes every connection now (in-flight requests are cancelled).
  virtual void StopAll() = 0;
  // Live connections.
  virtual size_t connection_count() const = 0;
};

}  // namespace niels::daemon::server
