#include "common/owner.h"

#include <fmt/format.h>

namespace niels::common {

OwnerId PrincipalOwner(std::string_view name) {
  // FNV-1a, 64 bits: a stable mapping of names an administrator wrote, not a defence against
  // anyone (the names are not secret and not chosen by clients).
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  constexpr uint64_t kLow48 = (uint64_t{1} << 48) - 1;
  return kFirstPrincipalOwner + (hash & kLow48);
}

std::string DescribeOwner(OwnerId owner) {
  if (IsUidOwner(owner)) return fmt::format("uid {}", owner);
  return fmt::format("API-key principal {:#x}", owner);
}

}  // namespace niels::common
