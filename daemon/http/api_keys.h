#pragma once
// ApiKeys: the API keys of the HTTP front's loopback TCP listener (nielsd --api-keys FILE,
// docs/HTTP.md "API keys"). Each key stands for a named principal; a principal is an identity of
// its own (common::PrincipalOwner), never any uid, so its sessions, quotas and prefix cache are
// its own. One principal may have several keys (to rotate them).
//
// The file: one `KEY NAME` a line (separated by spaces or tabs); blank lines and lines whose first
// non-blank character is `#` are skipped; a trailing CR is dropped. Refused, with a message naming
// the file and the line (never the key): a line over kMaxLineBytes, a line without a name or with
// more than two fields, a key shorter than kMinKeyBytes or longer than kMaxKeyBytes or with a
// character outside printable ASCII, a name longer than kMaxNameBytes or with a character outside
// [A-Za-z0-9._@+-], a key given twice, two names of one identity, more than kMaxKeys keys, a
// file over kMaxFileBytes, and a file without a key.
//
// Find() compares a presented key with every key in time independent of the keys' contents and
// lengths and of the presented key's content (it depends only on the number of keys).
//
// Immutable after Parse/Load; thread-safe.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/owner.h"
#include "common/status.h"

namespace niels::daemon::http {

struct ApiKeyPrincipal {
  std::string name;
  common::OwnerId owner = 0;  // common::PrincipalOwner(name)
};

class ApiKeys {
 public:
  static constexpr size_t kMinKeyBytes = 16;
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxNameBytes = 64;
  static constexpr size_t kMaxLineBytes = 1024;
  static constexpr size_t kMaxKeys = 4096;
  static constexpr size_t kMaxFileBytes = 1 << 20;

  // The keys in `text`, the contents of the file `file` (named in messages). INVALID_ARGUMENT
  // for what the class comment lists.
  static common::StatusOr<ApiKeys> Parse(std::string_view text, const std::string& file);

  // Reads and parses the file at `path`. Beside Parse's refusals: INVALID_ARGUMENT when it is not
  // a regular file, or when its mode gives its group or others any access (the message names the
  // file and its mode); NOT_FOUND / PERMISSION_DENIED when it cannot be opened. The mode is checked
  // on the opened file, so a file swapped in after the check is not read.
  static common::StatusOr<ApiKeys> Load(const std::string& path);

  // The principal whose key `presented` is; nullptr when it is none of them.
  const ApiKeyPrincipal* Find(std::string_view presented) const;

  size_t key_count() const { return keys_.size(); }
  const std::vector<ApiKeyPrincipal>& principals() const { return principals_; }

 private:
  // A key padded with zeros to kMaxKeyBytes, so every comparison touches the same bytes.
  struct Key {
    std::array<unsigned char, kMaxKeyBytes> bytes{};
    size_t length = 0;
    size_t principal = 0;  // index into principals_
  };

  std::vector<Key> keys_;
  std::vector<ApiKeyPrincipal> principals_;
};

}  // namespace niels::daemon::http
