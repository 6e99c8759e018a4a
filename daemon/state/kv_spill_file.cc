#include "daemon/state/kv_spill_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace niels::daemon::state {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "KV spill files are little-endian");

namespace {

constexpr std::array<char, 8> kMagic = {'N', 'I', 'E', 'L', 'S', 'K', 'V', '\0'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFingerprintBytes = 32;

#pragma pack(push, 1)
struct FileHeader {
  std::array<char, 8> magic;
  uint32_t version;
  uint32_t dtype;
  uint32_t layers;
  uint32_t heads;
  uint32_t head_dim;
  uint32_t reserved;
  uint64_t positions;
  uint64_t tokens_hash;
  std::array<char, kFingerprintBytes> fingerprint;
};
struct RangeHeader {
  uint32_t layer;
  uint32_t kind;
  uint64_t begin;
  uint64_t count;
};
#pragma pack(pop)
static_assert(sizeof(FileHeader) == 80 && sizeof(RangeHeader) == 24);

FileHeader MakeHeader(const KvSpillHeader& header) {
  FileHeader file{};
  file.magic = kMagic;
  file.version = kFormatVersion;
  file.dtype = static_cast<uint32_t>(header.dtype);
  file.layers = header.layers;
  file.heads = header.heads;
  file.head_dim = header.head_dim;
  file.positions = static_cast<uint64_t>(header.positions);
  file.tokens_hash = header.tokens_hash;
  std::memcpy(file.fingerprint.data(), header.model_fingerprint.data(),
              std::min(header.model_fingerprint.size(), kFingerprintBytes));
  return file;
}

common::Status Damaged(const fs::path& path, std::string_view problem) {
  return common::Status::Internal(fmt::format("damaged KV spill file {}: {}", path.string(), problem));
}

// "f32", "f16" or the code of an unknown dtype, for messages.
std::string DtypeLabel(uint32_t code) {
  if (code == static_cast<uint32_t>(KvSpillDtype::kF32)) return "f32";
  if (code == static_cast<uint32_t>(KvSpillDtype::kF16)) return "f16";
  return fmt::format("code {}", code);
}

// A read-only mapping of a whole file.
struct Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), size);
  }
};

}  // namespace

uint32_t KvSpillDtypeSize(KvSpillDtype dtype) { return dtype == KvSpillDtype::kF16 ? 2 : 4; }

uint64_t HashTokens(std::span<const int32_t> tokens) { return XXH3_64bits(tokens.data(), tokens.size_bytes()); }

uint64_t KvSpillFileBytes(const KvSpillHeader& header) {
  const uint64_t per_range = static_cast<uint64_t>(header.heads) * header.head_dim *
                             static_cast<uint64_t>(header.positions) * KvSpillDtypeSize(header.dtype);
  return sizeof(FileHeader) + 2ull * header.layers * (sizeof(RangeHeader) + per_range) + sizeof(uint64_t);
}

// ---------------------------------------------------------------------------------- writer

KvSpillWriter::KvSpillWriter(fs::path path, std::FILE* file, KvSpillHeader header)
    : path_(std::move(path)), temp_path_(path_.string() + ".tmp"), file_(file), header_(std::move(header)),
      hash_(XXH3_createState()) {
  XXH3_64bits_reset(hash_);
}

KvSpillWriter::~KvSpillWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) ::unlink(temp_path_.c_str());
  XXH3_freeState(hash_);
}

common::StatusOr<std::unique_ptr<KvSpillWriter>> KvSpillWriter::Create(const fs::path& path,
                                                                        const KvSpillHeader& header) {
  const std::string temp = path.string() + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return common::Status::Internal(fmt::format("cannot write KV spill file {}: {}", temp, std::strerror(errno)));
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    ::close(fd);
    return common::Status::Internal(fmt::format("cannot write KV spill file {}", temp));
  }
  std::unique_ptr<KvSpillWriter> writer(new KvSpillWriter(path, file, header));
  const FileHeader file_header = MakeHeader(header);
  NIELS_RETURN_IF_ERROR(writer->Write(&file_header, sizeof(file_header)));
  return writer;
}

common::Status KvSpillWriter::Write(const void* data, size_t bytes) {
  if (bytes == 0) return common::Status::Ok();
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    const int error = errno;
    common::Status status(error == ENOSPC ? common::StatusCode::kResourceExhausted : common::StatusCode::kInternal,
                          fmt::format("cannot write KV spill file {}: {}", temp_path_.string(), std::strerror(error)));
    return status;
  }
  XXH3_64bits_update(hash_, data, bytes);
  bytes_ += bytes;
  return common::Status::Ok();
}

common::Status KvSpillWriter::AddRange(uint32_t layer, KvKind kind, int64_t begin, int64_t count, const void* base,
                                       int64_t head_stride) {
  const RangeHeader range{layer, static_cast<uint32_t>(kind), static_cast<uint64_t>(begin),
                          static_cast<uint64_t>(count)};
  NIELS_RETURN_IF_ERROR(Write(&range, sizeof(range)));
  const size_t element = KvSpillDtypeSize(header_.dtype);
  const size_t head_bytes = static_cast<size_t>(count) * header_.head_dim * element;
  const auto* bytes = static_cast<const unsigned char*>(base);
  for (uint32_t h = 0; h < header_.heads; ++h) {
    NIELS_RETURN_IF_ERROR(Write(bytes + static_cast<size_t>(h * head_stride) * element, head_bytes));
  }
  return common::Status::Ok();
}

common::StatusOr<uint64_t> KvSpillWriter::Finish() {
  const uint64_t checksum = XXH3_64bits_digest(hash_);
  NIELS_RETURN_IF_ERROR(Write(&checksum, sizeof(checksum)));
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    return common::Status::Internal(fmt::format("cannot write KV spill file {}: {}", temp_path_.string(), std::strerror(errno)));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return common::Status::Internal(fmt::format("cannot rename {} to {}: {}", temp_path_.string(), path_.string(),
                                                std::strerror(errno)));
  }
  finished_ = true;
  return bytes_;
}

// ---------------------------------------------------------------------------------- reader

common::StatusOr<int64_t> PeekKvSpillPositions(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return common::Status::NotFound(fmt::format("no KV spill file {}", path.string()));
    return Damaged(path, std::strerror(errno));
  }
  FileHeader header{};
  const ssize_t got = ::pread(fd, &header, sizeof(header), 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(sizeof(header)) || header.magic != kMagic) return Damaged(path, "no header");
  return static_cast<int64_t>(std::min<uint64_t>(header.positions, INT64_MAX));
}

common::Status ReadKvSpill(const fs::path& path, const KvSpillHeader& expected,
                           const std::function<void(const KvSpillRange&)>& sink) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return common::Status::NotFound(fmt::format("no KV spill file {}", path.string()));
    return Damaged(path, std::strerror(errno));
  }
  struct stat st {};
  Mapping map;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* data = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (data != MAP_FAILED) {
      map.data = static_cast<const uint8_t*>(data);
      map.size = static_cast<size_t>(st.st_size);
      ::madvise(data, map.size, MADV_SEQUENTIAL);
    }
  }
  ::close(fd);
  if (map.data == nullptr || map.size < sizeof(FileHeader) + sizeof(uint64_t)) return Damaged(path, "too short");

  const size_t body = map.size - sizeof(uint64_t);
  uint64_t stored_checksum = 0;
  std::memcpy(&stored_checksum, map.data + body, sizeof(stored_checksum));
  if (XXH3_64bits(map.data, body) != stored_checksum) return Damaged(path, "checksum mismatch");

  FileHeader header{};
  std::memcpy(&header, map.data, sizeof(header));
  const FileHeader want = MakeHeader(expected);
  if (header.magic != kMagic || header.version != kFormatVersion) return Damaged(path, "not a version 1 KV spill file");
  if (header.dtype != want.dtype) {
    return Damaged(path, fmt::format("holds dtype {} where {} is expected (written under another --kv-dtype)",
                                     DtypeLabel(header.dtype), DtypeLabel(want.dtype)));
  }
  if (header.fingerprint != want.fingerprint) return Damaged(path, "written by another model");
  if (header.layers != want.layers || header.heads != want.heads || header.head_dim != want.head_dim) {
    return Damaged(path, "cache shape differs from the model's");
  }
  if (header.positions != want.positions || header.tokens_hash != want.tokens_hash) {
    return Damaged(path, "covers other tokens than the session's");
  }

  // First pass: the range table, checked for bounds and exact coverage.
  struct Located {
    RangeHeader range;
    size_t data_offset;
  };
  std::vector<Located> ranges;
  const uint64_t bytes_per_position =
      static_cast<uint64_t>(header.heads) * header.head_dim * KvSpillDtypeSize(expected.dtype);
  size_t offset = sizeof(FileHeader);
  while (offset < body) {
    if (body - offset < sizeof(RangeHeader)) return Damaged(path, "truncated range");
    RangeHeader range{};
    std::memcpy(&range, map.data + offset, sizeof(range));
    offset += sizeof(range);
    if (range.layer >= header.layers || range.kind > 1 || range.begin > header.positions ||
        range.count > header.positions - range.begin) {
      return Damaged(path, "range outside the cache");
    }
    const uint64_t bytes = range.count * bytes_per_position;
    if (bytes > body - offset) return Damaged(path, "truncated range data");
    ranges.push_back({range, offset});
    offset += bytes;
  }
  std::map<std::pair<uint32_t, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> coverage;
  for (const Located& located : ranges) {
    if (located.range.count > 0) {
      coverage[{located.range.layer, located.range.kind}].emplace_back(located.range.begin,
                                                                       located.range.begin + located.range.count);
    }
  }
  const size_t expected_streams = header.positions == 0 ? 0 : 2ull * header.layers;
  if (coverage.size() != expected_streams) return Damaged(path, "some layer is missing");
  for (auto& [stream, spans] : coverage) {
    std::sort(spans.begin(), spans.end());
    uint64_t covered = 0;
    for (const auto& [begin, end] : spans) {
      if (begin != covered) return Damaged(path, "ranges overlap or leave a gap");
      covered = end;
    }
    if (covered != header.positions) return Damaged(path, "ranges do not cover every position");
  }

  for (const Located& located : ranges) {
    KvSpillRange range;
    range.layer = located.range.layer;
    range.kind = static_cast<KvKind>(located.range.kind);
    range.begin = static_cast<int64_t>(located.range.begin);
    range.count = static_cast<int64_t>(located.range.count);
    range.data = map.data + located.data_offset;
    sink(range);
  }
  return common::Status::Ok();
}

}  // namespace niels::daemon::state
