#pragma once
// HttpOptions: where nielsd's HTTP front listens and every bound it holds a client to
// (docs/HTTP.md "Limits" lists them with their flags). One front listens on a Unix socket
// (`listener`) or, with `tcp` set, on a loopback TCP address with API keys.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <boost/asio/ip/tcp.hpp>

#include "common/frame.h"
#include "daemon/http/api_keys.h"
#include "daemon/http/loopback_access.h"
#include "daemon/server/listener.h"

namespace niels::daemon::http {

/// The loopback TCP listener (nielsd --http-listen, docs/HTTP.md "Listening on loopback TCP").
struct TcpListenOptions {
  /// A loopback address (ParseLoopbackEndpoint); port 0: the kernel picks one.
  boost::asio::ip::tcp::endpoint endpoint;
  /// Every request needs one of these keys; its principal is the caller. Never null.
  std::shared_ptr<const ApiKeys> keys;
  /// The Host and Origin headers taken besides the loopback names (no Origin by default).
  HostOriginRules host_origin;
};

struct HttpOptions {
  /// The socket (path, group), when `tcp` is unset. Never socket-activated: systemd's fd is the
  /// protobuf socket's.
  server::ListenerOptions listener;
  /// Set: the front listens on loopback TCP instead, with API keys and the Host/Origin rule.
  std::optional<TcpListenOptions> tcp;
  /// Largest request head (request line and headers); larger: 431 and the connection is closed.
  size_t max_header_bytes = 16 * 1024;
  /// Largest request body; larger: 413 and the connection is closed. Default: the protobuf socket's
  /// largest frame (4 MiB).
  size_t max_body_bytes = common::kDefaultMaxFrameBytes;
  /// From a request's first byte to the end of its head; slower: the connection is closed.
  std::chrono::milliseconds header_timeout = std::chrono::seconds(10);
  /// For the whole body, from the end of the head; slower: 408 and the connection is closed.
  std::chrono::milliseconds body_timeout = std::chrono::seconds(30);
  /// A kept-alive connection waiting for its next request longer than this is closed.
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  /// A response or stream event the client does not take within this is its end: the connection
  /// is closed and its request cancelled (the protobuf socket's backlog_timeout).
  std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
  /// Stream events of one request waiting to be written, bytes; past it events are refused and the
  /// request is cancelled (the protobuf socket's max_queued_bytes).
  size_t max_queued_bytes = 8u << 20;
  /// Live connections at most, all peers together / for one peer uid; past them a new connection
  /// gets 429 with Retry-After and is closed before anything is read from it. On TCP the per-uid
  /// limit is per principal, checked when a request's key names it (429 and the connection closed).
  size_t max_connections = 1000;
  size_t max_connections_per_uid = 64;
  /// The kernel's overflow uid: it gets no sessions (as on the protobuf socket).
  std::optional<uint32_t> overflow_uid;
};

}  // namespace niels::daemon::http
