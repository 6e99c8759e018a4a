#pragma once
// The rules of the HTTP front's loopback TCP listener (nielsd --http-listen, docs/HTTP.md
// "Listening on loopback TCP") that are not about keys: which addresses it may bind, and which
// requests a web page could have sent (DNS rebinding, cross-origin requests), which it refuses.
//
// Pure functions; thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "common/status.h"

namespace niels::daemon::http {

// The endpoint of `text`, "127.0.0.1:PORT" (any address of 127.0.0.0/8) or "[::1]:PORT", PORT 0 to
// 65535 (0: the kernel picks a free port). INVALID_ARGUMENT naming `text` for anything else: a
// host name, an address that is not loopback (0.0.0.0, ::, 8.8.8.8, ::ffff:127.0.0.1, ...), a
// missing or bad port.
common::StatusOr<boost::asio::ip::tcp::endpoint> ParseLoopbackEndpoint(std::string_view text);

// "127.0.0.1:8080", "[::1]:8080".
std::string EndpointText(const boost::asio::ip::tcp::endpoint& endpoint);

// Which Host and Origin headers the listener takes besides its own names (--http-allow-host,
// --http-allow-origin).
struct HostOriginRules {
  // Host names (without port, compared case-insensitively) taken besides localhost and the
  // loopback addresses.
  std::vector<std::string> allowed_hosts;
  // Origin headers taken, compared exactly after lowercasing ("http://localhost:3000").
  std::vector<std::string> allowed_origins;
};

// Why a request with these headers is refused (for its 403), or nullopt when it is taken: its
// Host (with or without a port) must be "localhost", an IPv4 address of 127.0.0.0/8, "[::1]" or an
// allowed host; it must carry no Origin unless that origin is allowed. A missing Host is refused.
std::optional<std::string> HostOriginRefusal(std::optional<std::string_view> host,
                                             std::optional<std::string_view> origin, const HostOriginRules& rules);

}  // namespace niels::daemon::http
