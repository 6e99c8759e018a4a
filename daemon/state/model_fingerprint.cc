#include "daemon/state/model_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <xxhash.h>

namespace niels::daemon::state {
namespace {

constexpr uint64_t kWholeFileBytes = 1 << 20;
constexpr uint64_t kBlockBytes = 4096;
constexpr int kSampledBlocks = 64;

struct HashState {
  XXH3_state_t* state = XXH3_createState();
  ~HashState() { XXH3_freeState(state); }
};

common::Status FileError(const std::filesystem::path& file, int error) {
  return common::Status::InvalidArgument(
      fmt::format("model fingerprint: cannot read {}: {}", file.string(), std::strerror(error)));
}

// Hashes `length` bytes at `offset` of `fd` into `hash`.
bool HashRange(int fd, uint64_t offset, uint64_t length, XXH3_state_t* hash) {
  std::vector<char> buffer(std::min<uint64_t>(length, kWholeFileBytes));
  while (length > 0) {
    const ssize_t got = ::pread(fd, buffer.data(), std::min<uint64_t>(length, buffer.size()), static_cast<off_t>(offset));
    if (got <= 0) return false;
    XXH3_128bits_update(hash, buffer.data(), static_cast<size_t>(got));
    offset += static_cast<uint64_t>(got);
    length -= static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

common::StatusOr<std::string> ModelFingerprint(const std::vector<std::filesystem::path>& files) {
  HashState hash;
  XXH3_128bits_reset(hash.state);
  const std::string_view tag = "niels-model-fingerprint-v1";
  XXH3_128bits_update(hash.state, tag.data(), tag.size());
  for (const std::filesystem::path& file : files) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FileError(file, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      ::close(fd);
      return FileError(file, error);
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    const std::string name = file.filename().string();
    XXH3_128bits_update(hash.state, name.data(), name.size() + 1);
    XXH3_128bits_update(hash.state, &size, sizeof(size));
    bool ok = HashRange(fd, 0, std::min(size, kWholeFileBytes), hash.state);
    if (ok && size > kWholeFileBytes) {
      const uint64_t rest = size - kWholeFileBytes;
      for (int i = 0; ok && i < kSampledBlocks; ++i) {
        const uint64_t offset = kWholeFileBytes + rest / kSampledBlocks * i;
        ok = HashRange(fd, offset, std::min(kBlockBytes, size - offset), hash.state);
      }
      if (ok) ok = HashRange(fd, size - std::min(size, kBlockBytes), std::min(size, kBlockBytes), hash.state);
    }
    ::close(fd);
    if (!ok) return FileError(file, EIO);
  }
  const XXH128_hash_t digest = XXH3_128bits_digest(hash.state);
  return fmt::format("{:016x}{:016x}", digest.high64, digest.low64);
}

}  // namespace niels::daemon::state
