#pragma once
// OwnerId: who a session, a share of the quotas and a prefix-cache scope belong to. Two disjoint
// spaces of identities:
//   - a peer of nielsd's Unix sockets (protobuf and HTTP) is its uid from SO_PEERCRED, 0 to 2^32 - 1;
//   - an API-key principal of the HTTP TCP listener (docs/HTTP.md "Listening on loopback TCP") is
//     a number from 2^32 up (PrincipalOwner), so no principal is ever any uid, root included.
// Everything that isolates users (sessions, their limits, the queue and batch shares, the prefix
// index's scope) keys on the OwnerId, so a principal is isolated and limited exactly like a uid.
//
// Pure functions; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

namespace niels::common {

using OwnerId = uint64_t;

// The first identity of the principal space: one more than the largest uid.
inline constexpr OwnerId kFirstPrincipalOwner = OwnerId{1} << 32;

// The owner that is the peer uid `uid`.
constexpr OwnerId UidOwner(uint32_t uid) { return uid; }

// True for an owner from a uid, false for an API-key principal.
constexpr bool IsUidOwner(OwnerId owner) { return owner < kFirstPrincipalOwner; }

// The identity of the API-key principal named `name`: kFirstPrincipalOwner plus 48 bits of a hash
// of the name, so it is the same across restarts (a durable session of the principal stays its
// own) and below 2^49 (prefix-cache scopes need it below 2^63). Two names may share one (one chance
// in 2^48 per pair): whoever loads the names refuses such a pair.
OwnerId PrincipalOwner(std::string_view name);

// "uid 1000", or "API-key principal 0x1a2b3c..." for a principal: for messages that name whose
// limit was reached.
std::string DescribeOwner(OwnerId owner);

}  // namespace niels::common
