#pragma once
// Where the nielsd socket lives (docs/ARCHITECTURE.md "The daemon process"). The daemon and every
// client resolve it the same way, first match wins:
//   1. --socket PATH (a non-empty flag value)
//   2. $NIELSD_SOCKET
//   3. $XDG_RUNTIME_DIR/nielsd/nielsd.sock (a per-user daemon)
//   4. /run/nielsd/nielsd.sock (XDG_RUNTIME_DIR unset: a system service, root)
// Empty environment values count as unset. The environment is a parameter so tests are hermetic.
//
// Pure functions apart from SocketEnv::FromProcess (reads getenv); thread-safe.

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace niels::common {

inline constexpr std::string_view kSystemSocketPath = "/run/nielsd/nielsd.sock";
// sizeof(sockaddr_un::sun_path) is 108 on Linux; one byte is the terminating NUL.
inline constexpr size_t kMaxSocketPathBytes = 107;

// The environment variables that take part in the resolution.
struct SocketEnv {
  std::optional<std::string> nielsd_socket;    // $NIELSD_SOCKET
  std::optional<std::string> xdg_runtime_dir;  // $XDG_RUNTIME_DIR

  // Reads both variables from the process environment.
  static SocketEnv FromProcess();
};

// Resolves the socket path by the precedence above.
// Returns INVALID_ARGUMENT (naming the path, its length and where it came from) when the path is
// longer than kMaxSocketPathBytes and so cannot be bound or connected to.
StatusOr<std::string> ResolveSocketPath(std::string_view flag_value, const SocketEnv& env);

// OK, or INVALID_ARGUMENT when `path` does not fit sockaddr_un::sun_path (or is empty).
Status CheckSocketPathLength(std::string_view path);

}  // namespace niels::common
