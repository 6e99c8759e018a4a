#pragma once
// Dispatcher: maps one decoded Request of a connection to its handling.
//   - Cancel is connection-local: it sets the target request's cancel flag and answers
//     CancelResponse{found} at once (found = the target was still in flight on this connection).
//   - A Request with no kind set (or a kind this build's proto does not know): UNIMPLEMENTED.
//   - A request_id already in flight on the same connection: INVALID_ARGUMENT (a Cancel with such an
//     id included: it is refused, not carried out).
//   - CreateSession/ForkSession from a peer whose uid is the kernel's overflow uid: PERMISSION_DENIED.
//     Such a peer's real uid is not mapped into nielsd's user namespace, so all such peers look
//     alike and must not own sessions (they could read each other's).
//   - Everything else becomes a Job (caller uid, request, cancel flag, sink) for the RequestService; it
//     answers it. What only the server knows is filled in on the way out: Stats gets the live
//     connection counts, Info the largest accepted frame.
// Status -> wire conversion happens here (common::ToProto) for the errors the server itself answers.
//
// Threading: Dispatch() runs on the calling connection's strand; the dispatcher itself holds no
// mutable state, so one instance serves every connection. It sees a connection only as a
// RequestChannel (request_channel.h).

#include <cstdint>

#include "common/defaults.h"
#include <optional>
#include <string>

#include "daemon/server/request_channel.h"
#include "daemon/server/request_service.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

class ConnectionRegistry;

struct DispatcherOptions {
  /// The uid the kernel reports for unmapped peers (ReadOverflowUid()); unset: no peer is refused
  /// for its uid.
  std::optional<uint32_t> overflow_uid;
  /// The largest request frame the connections accept (reported in Info).
  uint64_t max_frame_bytes = common::kDefaultMaxFrameBytes;
};

class Dispatcher {
 public:
  /// `service` and `registry` must outlive the dispatcher.
  Dispatcher(RequestService& service, const ConnectionRegistry& registry, DispatcherOptions options);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  /// Handles one request of `connection`. REQUIRES: on `connection`'s strand.
  void Dispatch(RequestChannel& connection, niels::v1::Request request);

 private:
  RequestService& service_;
  const ConnectionRegistry& registry_;
  const DispatcherOptions options_;
};

/// A connection's RequestHandler that hands every request to `dispatcher` (which must outlive it).
RequestHandler DispatchTo(Dispatcher& dispatcher);

/// The kernel's overflow uid (normally 65534), read from `path`; unset when it cannot be read.
std::optional<uint32_t> ReadOverflowUid(const std::string& path = "/proc/sys/kernel/overflowuid");

}  // namespace niels::daemon::server
