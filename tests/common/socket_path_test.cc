#include "common/socket_path.h"

#include <sys/un.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace niels::common {
namespace {

struct PathCase {
  std::string name;
  std::string flag;
  SocketEnv env;
  std::string expected;
};

std::vector<PathCase> PathCases() {
  const std::optional<std::string> unset;
  return {
      {"FlagWinsOverEverything", "/tmp/a.sock", {"/tmp/env.sock", "/run/user/1000"}, "/tmp/a.sock"},
      {"EnvVarWinsOverXdg", "", {"/tmp/env.sock", "/run/user/1000"}, "/tmp/env.sock"},
      {"XdgRuntimeDir", "", {unset, "/run/user/1000"}, "/run/user/1000/nielsd/nielsd.sock"},
      {"XdgWithTrailingSlash", "", {unset, "/run/user/0/"}, "/run/user/0/nielsd/nielsd.sock"},
      {"SystemDefault", "", {unset, unset}, "/run/nielsd/nielsd.sock"},
      {"EmptyEnvCountsAsUnset", "", {std::string(), std::string()}, "/run/nielsd/nielsd.sock"},
      {"EmptyNielsdSocketFallsToXdg", "", {std::string(), "/x"}, "/x/nielsd/nielsd.sock"},
      {"RelativeFlagKept", "rel.sock", {unset, "/run/user/1"}, "rel.sock"},
  };
}

class ResolveSocketPathTest : public testing::TestWithParam<PathCase> {};

TEST_P(ResolveSocketPathTest, Resolves) {
  const PathCase& tc = GetParam();
  StatusOr<std::string> path = ResolveSocketPath(tc.flag, tc.env);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, tc.expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, ResolveSocketPathTest, testing::ValuesIn(PathCases()),
                         [](const testing::TestParamInfo<PathCase>& info) { return info.param.name; });

TEST(SocketPathTest, LimitMatchesSunPath) {
  EXPECT_EQ(kMaxSocketPathBytes + 1, sizeof(sockaddr_un{}.sun_path));
}

TEST(SocketPathTest, TooLongPathIsInvalidArgumentNamingSource) {
  const std::string fits = "/" + std::string(sizeof(sockaddr_un{}.sun_path) - 2, 'a');  // 107 bytes
  EXPECT_TRUE(ResolveSocketPath(fits, {}).ok());
  const std::string too_long = fits + "b";  // 108 bytes: no room for the NUL
  StatusOr<std::string> flag = ResolveSocketPath(too_long, {});
  ASSERT_FALSE(flag.ok());
  EXPECT_EQ(flag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(flag.status().message().find(too_long), std::string::npos);
  EXPECT_NE(flag.status().message().find("--socket"), std::string::npos);
  EXPECT_NE(flag.status().message().find("108 bytes"), std::string::npos);

  // A long XDG_RUNTIME_DIR overflows only after the suffix is appended.
  SocketEnv env{std::nullopt, "/" + std::string(90, 'x')};
  StatusOr<std::string> xdg = ResolveSocketPath("", env);
  ASSERT_FALSE(xdg.ok());
  EXPECT_NE(xdg.status().message().find("$XDG_RUNTIME_DIR"), std::string::npos);
}

TEST(SocketPathTest, FromProcessReadsEnvironment) {
  ASSERT_EQ(setenv("NIELSD_SOCKET", "/tmp/from-env.sock", 1), 0);
  ASSERT_EQ(setenv("XDG_RUNTIME_DIR", "", 1), 0);
  SocketEnv env = SocketEnv::FromProcess();
  EXPECT_EQ(env.nielsd_socket, std::optional<std::string>("/tmp/from-env.sock"));
  EXPECT_FALSE(env.xdg_runtime_dir.has_value());
  unsetenv("NIELSD_SOCKET");
  unsetenv("XDG_RUNTIME_DIR");
}

}  // namespace
}  // namespace niels::common
