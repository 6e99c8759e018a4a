#include "daemon/http/api_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace niels::daemon::http {
namespace {

using common::Status;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

bool IsKeyChar(char c) { return c > 0x20 && c < 0x7f; }

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '@' || c == '+' || c == '-';
}

// The fields of a line split at runs of blanks.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && IsBlank(line[at])) ++at;
    const size_t start = at;
    while (at < line.size() && !IsBlank(line[at])) ++at;
    if (at > start) fields.push_back(line.substr(start, at - start));
  }
  return fields;
}

// Why `key` cannot be a key, or nullopt.
std::optional<std::string> KeyProblem(std::string_view key) {
  if (key.size() < ApiKeys::kMinKeyBytes) {
    return fmt::format("the key has {} characters, fewer than {} (make one with: head -c 32 /dev/urandom | base64)",
                       key.size(), ApiKeys::kMinKeyBytes);
  }
  if (key.size() > ApiKeys::kMaxKeyBytes) {
    return fmt::format("the key has {} characters, more than {}", key.size(), ApiKeys::kMaxKeyBytes);
  }
  for (const char c : key) {
    if (!IsKeyChar(c)) return "the key has a character outside printable ASCII";
  }
  return std::nullopt;
}

std::optional<std::string> NameProblem(std::string_view name) {
  if (name.size() > ApiKeys::kMaxNameBytes) {
    return fmt::format("the name has {} characters, more than {}", name.size(), ApiKeys::kMaxNameBytes);
  }
  for (const char c : name) {
    if (!IsNameChar(c)) return "the name has a character other than letters, digits and . _ @ + -";
  }
  return std::nullopt;
}

}  // namespace

common::StatusOr<ApiKeys> ApiKeys::Parse(std::string_view text, const std::string& file) {
  if (text.size() > kMaxFileBytes) {
    return Status::InvalidArgument(
        fmt::format("--api-keys {}: the file has more than {} bytes", file, kMaxFileBytes));
  }
  ApiKeys keys;
  std::map<std::string, size_t, std::less<>> line_of_key;        // key -> the line that gave it
  std::map<std::string, size_t, std::less<>> principal_of_name;  // name -> index into principals_
  std::map<common::OwnerId, std::string> name_of_owner;
  size_t line_number = 0;
  size_t at = 0;
  while (at < text.size()) {
    ++line_number;
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    auto refuse = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("--api-keys {} line {}: {}", file, line_number, why));
    };
    if (line.size() > kMaxLineBytes) return refuse(fmt::format("the line is longer than {} bytes", kMaxLineBytes));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<std::string_view> fields = Fields(line);
    if (fields.empty() || fields.front().front() == '#') continue;
    if (fields.size() == 1) return refuse("a key without a name: write KEY NAME (the name of whom the key stands for)");
    if (fields.size() > 2) return refuse(fmt::format("{} fields: write KEY NAME", fields.size()));
    const std::string_view key = fields[0];
    const std::string_view name = fields[1];
    if (std::optional<std::string> problem = KeyProblem(key)) return refuse(*problem);
    if (std::optional<std::string> problem = NameProblem(name)) return refuse(*problem);
    if (auto seen = line_of_key.find(key); seen != line_of_key.end()) {
      return refuse(fmt::format("the key of line {} again: each key must stand for one principal only", seen->second));
    }
    if (keys.keys_.size() >= kMaxKeys) return refuse(fmt::format("more than {} keys", kMaxKeys));
    line_of_key.emplace(std::string(key), line_number);
    auto principal = principal_of_name.find(name);
    if (principal == principal_of_name.end()) {
      const common::OwnerId owner = common::PrincipalOwner(name);
      if (auto other = name_of_owner.find(owner); other != name_of_owner.end()) {
        return refuse(fmt::format("the names {} and {} map to one identity ({}); rename one", other->second, name,
                                  common::DescribeOwner(owner)));
      }
      name_of_owner.emplace(owner, std::string(name));
      principal = principal_of_name.emplace(std::string(name), keys.principals_.size()).first;
      keys.principals_.push_back(ApiKeyPrincipal{std::string(name), owner});
    }
    Key entry;
    std::memcpy(entry.bytes.data(), key.data(), key.size());
    entry.length = key.size();
    entry.principal = principal->second;
    keys.keys_.push_back(entry);
  }
  if (keys.keys_.empty()) {
    return Status::InvalidArgument(fmt::format("--api-keys {}: the file has no key (one KEY NAME a line)", file));
  }
  return keys;
}

common::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    const std::string message = fmt::format("--api-keys {}: {}", path, std::strerror(error));
    if (error == ENOENT) return Status::NotFound(message);
    if (error == EACCES || error == EPERM) return Status::PermissionDenied(message);
    return Status::InvalidArgument(message);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    return Status::InvalidArgument(fmt::format("--api-keys {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(fmt::format("--api-keys {}: not a regular file", path));
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 077) != 0) {
    return Status::InvalidArgument(fmt::format(
        "--api-keys {}: mode {:04o} lets its group or others read or write the keys; nielsd takes the file only "
        "when its owner alone has access (chmod 600 {})",
        path, mode, path));
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::InvalidArgument(fmt::format("--api-keys {}: {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) {
      return Status::InvalidArgument(fmt::format("--api-keys {}: the file has more than {} bytes", path, kMaxFileBytes));
    }
  }
  return Parse(text, path);
}

const ApiKeyPrincipal* ApiKeys::Find(std::string_view presented) const {
  // The presented key padded like the stored ones; a longer one keeps its length, so it matches
  // nothing, but is compared over the same bytes.
  std::array<unsigned char, kMaxKeyBytes> padded{};
  std::memcpy(padded.data(), presented.data(), std::min(presented.size(), kMaxKeyBytes));
  size_t found = principals_.size();  // none
  for (const Key& key : keys_) {
    unsigned difference = 0;
    for (size_t i = 0; i < kMaxKeyBytes; ++i) difference |= key.bytes[i] ^ padded[i];
    const size_t length_difference = key.length ^ presented.size();
    // All ones when this key matches, zero otherwise, without a branch on the comparison.
    const size_t no_difference = (difference | static_cast<unsigned>(length_difference != 0)) == 0;
    const size_t mask = size_t{0} - no_difference;
    found = (key.principal & mask) | (found & ~mask);
  }
  return found < principals_.size() ? &principals_[found] : nullptr;
}

}  // namespace niels::daemon::http
