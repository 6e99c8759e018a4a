#include "daemon/http/loopback_access.h"

#include <string>

#include <gtest/gtest.h>

namespace niels::daemon::http {
namespace {

TEST(LoopbackEndpointTest, LoopbackAddressesAreTaken) {
  struct Case {
    const char* text;
    const char* shown;
  };
  for (const Case c : {Case{"127.0.0.1:8080", "127.0.0.1:8080"}, Case{"127.0.0.1:0", "127.0.0.1:0"},
                       Case{"127.1.2.3:65535", "127.1.2.3:65535"}, Case{"[::1]:8080", "[::1]:8080"},
                       Case{"[0:0:0:0:0:0:0:1]:9", "[::1]:9"}}) {
    common::StatusOr<boost::asio::ip::tcp::endpoint> endpoint = ParseLoopbackEndpoint(c.text);
    ASSERT_TRUE(endpoint.ok()) << c.text << ": " << endpoint.status().ToString();
    EXPECT_EQ(EndpointText(*endpoint), c.shown);
  }
}

TEST(LoopbackEndpointTest, EverythingElseIsRefusedClearly) {
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case c : {Case{"0.0.0.0:8080", "0.0.0.0 is not a loopback address"},
                       Case{"8.8.8.8:80", "8.8.8.8 is not a loopback address"},
                       Case{"192.168.1.2:80", "is not a loopback address"},
                       Case{"[::]:8080", ":: is not a loopback address"},
                       Case{"[::ffff:127.0.0.1]:80", "IPv4-mapped"},
                       Case{"localhost:8080", "not an IP address"},
                       Case{"127.0.0.1", "no port"},
                       Case{"127.0.0.1:", "the port is not a number"},
                       Case{"127.0.0.1:65536", "the port is not a number"},
                       Case{"127.0.0.1:-1", "the port is not a number"},
                       Case{"127.0.0.1:80x", "the port is not a number"},
                       Case{"::1:80", "in brackets"},
                       Case{"[::1]", "expected [ADDRESS]:PORT"},
                       Case{"[::1:80", "expected [ADDRESS]:PORT"},
                       Case{"", "no port"}}) {
    common::StatusOr<boost::asio::ip::tcp::endpoint> endpoint = ParseLoopbackEndpoint(c.text);
    ASSERT_FALSE(endpoint.ok()) << c.text;
    EXPECT_EQ(endpoint.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_NE(endpoint.status().message().find(c.expected), std::string::npos) << endpoint.status().message();
    EXPECT_NE(endpoint.status().message().find(std::string("--http-listen ") + c.text), std::string::npos)
        << endpoint.status().message();
    EXPECT_NE(endpoint.status().message().find("loopback only"), std::string::npos) << endpoint.status().message();
  }
}

TEST(HostOriginTest, LoopbackHostsWithoutOriginAreTaken) {
  const HostOriginRules rules;
  for (const char* host : {"localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:1", "127.9.9.9:80", "[::1]",
                           "[::1]:8080"}) {
    EXPECT_EQ(HostOriginRefusal(host, std::nullopt, rules), std::nullopt) << host;
  }
}

TEST(HostOriginTest, OtherHostsAndAnyOriginAreRefused) {
  const HostOriginRules rules;
  for (const char* host : {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example",
                           "0.0.0.0:80", "10.0.0.1", "[::2]:80", "localhost:80x", "localhost:", "[::1]x", "[::1",
                           ""}) {
    std::optional<std::string> refusal = HostOriginRefusal(host, std::nullopt, rules);
    ASSERT_TRUE(refusal.has_value()) << host;
  }
  EXPECT_NE(HostOriginRefusal("evil.example:80", std::nullopt, rules)->find("Host evil.example:80 is not a loopback"),
            std::string::npos);
  EXPECT_NE(HostOriginRefusal(std::nullopt, std::nullopt, rules)->find("no Host"), std::string::npos);
  for (const char* origin : {"http://localhost:3000", "null", "", "http://127.0.0.1:8080"}) {
    std::optional<std::string> refusal = HostOriginRefusal("localhost", origin, rules);
    ASSERT_TRUE(refusal.has_value()) << origin;
    EXPECT_NE(refusal->find("Origin header"), std::string::npos) << *refusal;
  }
}

TEST(HostOriginTest, AllowedHostsAndOriginsAreTaken) {
  HostOriginRules rules;
  rules.allowed_hosts = {"nielsd.internal"};
  rules.allowed_origins = {"http://localhost:3000"};
  EXPECT_EQ(HostOriginRefusal("nielsd.internal:8080", std::nullopt, rules), std::nullopt);
  EXPECT_EQ(HostOriginRefusal("NIELSD.internal", std::nullopt, rules), std::nullopt);
  EXPECT_EQ(HostOriginRefusal("localhost", "http://localhost:3000", rules), std::nullopt);
  EXPECT_EQ(HostOriginRefusal("localhost", "HTTP://LOCALHOST:3000", rules), std::nullopt);
  EXPECT_TRUE(HostOriginRefusal("localhost", "http://localhost:3001", rules).has_value());
  EXPECT_TRUE(HostOriginRefusal("other.internal", std::nullopt, rules).has_value());
  // An allowed origin does not let another Host in.
  EXPECT_TRUE(HostOriginRefusal("evil.example", "http://localhost:3000", rules).has_value());
}

}  // namespace
}  // namespace niels::daemon::http
