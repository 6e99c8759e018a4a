#include "common/socket_path.h"

#include <cstdlib>

namespace niels::common {
namespace {

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool Set(const std::optional<std::string>& value) { return value.has_value() && !value->empty(); }

}  // namespace

SocketEnv SocketEnv::FromProcess() {
  return SocketEnv{NonEmptyEnv("NIELSD_SOCKET"), NonEmptyEnv("XDG_RUNTIME_DIR")};
}

Status CheckSocketPathLength(std::string_view path) {
  if (path.empty()) return Status::InvalidArgument("empty socket path");
  if (path.size() > kMaxSocketPathBytes) {
    return Status::InvalidArgument("socket path is " + std::to_string(path.size()) +
                                   " bytes, more than the " + std::to_string(kMaxSocketPathBytes) +
                                   " a Unix socket address can hold: " + std::string(path));
  }
  return Status::Ok();
}

StatusOr<std::string> ResolveSocketPath(std::string_view flag_value, const SocketEnv& env) {
  std::string path;
  std::string source;
  if (!flag_value.empty()) {
    path = std::string(flag_value);
    source = "--socket";
  } else if (Set(env.nielsd_socket)) {
    path = *env.nielsd_socket;
    source = "$NIELSD_SOCKET";
  } else if (Set(env.xdg_runtime_dir)) {
    path = *env.xdg_runtime_dir;
    if (path.back() != '/') path += '/';
    path += "nielsd/nielsd.sock";
    source = "$XDG_RUNTIME_DIR";
  } else {
    path = std::string(kSystemSocketPath);
    source = "the system default";
  }
  Status length = CheckSocketPathLength(path);
  if (!length.ok()) return Status::InvalidArgument(length.message() + " (from " + source + ")");
  return path;
}

}  // namespace niels::common
