#include "daemon/http/loopback_access.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <boost/asio/ip/address.hpp>

#include <fmt/format.h>

namespace niels::daemon::http {
namespace {

namespace ip = boost::asio::ip;
using common::Status;

std::string Lower(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower;
}

// The port of ":PORT" (digits only, at most 65535).
std::optional<unsigned short> ParsePort(std::string_view digits) {
  if (digits.empty() || digits.size() > 5) return std::nullopt;
  unsigned value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value > 65535) return std::nullopt;
  return static_cast<unsigned short>(value);
}

bool IsLoopbackIpv4Literal(std::string_view host) {
  boost::system::error_code ec;
  const ip::address_v4 address = ip::make_address_v4(std::string(host), ec);
  return !ec && address.is_loopback();
}

// `host` without its port: "[::1]:80" -> "[::1]", "localhost:80" -> "localhost"; nullopt when the
// port is not digits.
std::optional<std::string_view> WithoutPort(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !ParsePort(rest.substr(1)))) return std::nullopt;
    return host.substr(0, close + 1);
  }
  const size_t colon = host.rfind(':');
  if (colon == std::string_view::npos) return host;
  if (!ParsePort(host.substr(colon + 1))) return std::nullopt;
  return host.substr(0, colon);
}

}  // namespace

common::StatusOr<ip::tcp::endpoint> ParseLoopbackEndpoint(std::string_view text) {
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format(
        "--http-listen {}: {}; nielsd listens on loopback only: give 127.0.0.1:PORT or [::1]:PORT",
        std::string(text.substr(0, 256)), why));
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return refuse("expected [ADDRESS]:PORT");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return refuse("no port (ADDRESS:PORT)");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return refuse("an IPv6 address goes in brackets: [::1]:PORT");
  }
  const std::optional<unsigned short> port_number = ParsePort(port);
  if (!port_number) return refuse("the port is not a number from 0 to 65535");
  boost::system::error_code ec;
  const ip::address address = ip::make_address(std::string(host), ec);
  if (ec) return refuse("not an IP address (host names are not taken)");
  if (address.is_v6() && address.to_v6().is_v4_mapped()) return refuse("an IPv4-mapped address is not taken");
  if (!address.is_loopback()) return refuse(fmt::format("{} is not a loopback address", address.to_string()));
  return ip::tcp::endpoint(address, *port_number);
}

std::string EndpointText(const ip::tcp::endpoint& endpoint) {
  if (endpoint.address().is_v6()) return fmt::format("[{}]:{}", endpoint.address().to_string(), endpoint.port());
  return fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port());
}

std::optional<std::string> HostOriginRefusal(std::optional<std::string_view> host,
                                             std::optional<std::string_view> origin, const HostOriginRules& rules) {
  if (origin) {
    const std::string lowered = Lower(*origin);
    if (std::find(rules.allowed_origins.begin(), rules.allowed_origins.end(), lowered) == rules.allowed_origins.end()) {
      return fmt::format(
          "requests with an Origin header ({}) are refused: a web page cannot use nielsd (nielsd "
          "--http-allow-origin ORIGIN takes one)",
          std::string(origin->substr(0, 256)));
    }
  }
  if (!host || host->empty()) return "the request has no Host header";
  const std::optional<std::string_view> name = WithoutPort(*host);
  const std::string shown(host->substr(0, 256));
  if (name) {
    const std::string lowered = Lower(*name);
    if (lowered == "localhost" || lowered == "[::1]" || IsLoopbackIpv4Literal(lowered)) return std::nullopt;
    if (std::find(rules.allowed_hosts.begin(), rules.allowed_hosts.end(), lowered) != rules.allowed_hosts.end()) {
      return std::nullopt;
    }
  }
  return fmt::format(
      "Host {} is not a loopback name (localhost, 127.0.0.1, [::1]): refused, so a web page cannot reach nielsd "
      "through a DNS name (nielsd --http-allow-host NAME takes one)",
      shown);
}

}  // namespace niels::daemon::http
