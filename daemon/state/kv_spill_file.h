#pragma once
// The KV spill file: one session's cached keys and values on disk (docs/ARCHITECTURE.md, "Durable
// sessions"), written when an idle session's cache is evicted from memory and read back on its next
// turn instead of recomputing it.
//
// A file is a header, then a list of ranges, then a checksum. Each range is the keys or the values
// of one layer for positions [begin, begin + count), stored as [heads, count, head_dim] elements of
// the cache's dtype (f32, or f16 for nielsd --kv-dtype f16), copied as they are in memory. A
// whole-cache writer emits one range per layer and kind; a cache made of fixed-size blocks emits one
// per block. A reader accepts any list of ranges that covers [0, positions) of every layer and kind
// exactly once. Layout (little-endian):
//
//   header  (80 bytes): "NIELSKV\0", u32 format version (1), u32 dtype (1 = f32, 2 = f16), u32 layers,
//                       u32 heads, u32 head_dim, u32 reserved (0), u64 positions,
//                       u64 XXH3-64 of the token ids the cache covers, 32 bytes model fingerprint
//   range   (24 bytes + data): u32 layer, u32 kind (0 keys, 1 values), u64 begin, u64 count,
//                       then heads * count * head_dim elements of the header's dtype
//   trailer (8 bytes):  u64 XXH3-64 of every byte before it
//
// A file whose checksum, header (dtype included: a cache of another --kv-dtype) or coverage does not
// match what the reader expects is refused whole (DATA_LOSS-like INTERNAL error naming the problem): the caller recomputes the cache. Files
// are written under a temporary name and renamed into place, so a reader never sees half a file.
//
// Threading: a writer or a read is used by one thread; distinct files may be handled concurrently.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <xxhash.h>

#include "common/status.h"

namespace niels::daemon::state {

enum class KvKind : uint32_t { kKeys = 0, kValues = 1 };
// The element type of a spill file's keys and values (the header's code).
enum class KvSpillDtype : uint32_t { kF32 = 1, kF16 = 2 };
// Bytes per element: 4 or 2.
uint32_t KvSpillDtypeSize(KvSpillDtype dtype);

struct KvSpillHeader {
  std::string model_fingerprint;  // 32 hex digits (ModelFingerprint)
  KvSpillDtype dtype = KvSpillDtype::kF32;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t head_dim = 0;
  int64_t positions = 0;          // tokens covered: [0, positions)
  uint64_t tokens_hash = 0;       // HashTokens of those tokens' ids
  bool operator==(const KvSpillHeader&) const = default;
};

// XXH3-64 of the ids, as stored in the header.
uint64_t HashTokens(std::span<const int32_t> tokens);

// Bytes of the file for a cache of `header.positions` positions written as one range per layer and
// kind.
uint64_t KvSpillFileBytes(const KvSpillHeader& header);

class KvSpillWriter {
 public:
  // Starts `path` (written as "<path>.tmp" until Finish()). INTERNAL naming the file on failure.
  static common::StatusOr<std::unique_ptr<KvSpillWriter>> Create(const std::filesystem::path& path,
                                                                  const KvSpillHeader& header);
  ~KvSpillWriter();  // removes the temporary file unless Finish() succeeded
  KvSpillWriter(const KvSpillWriter&) = delete;
  KvSpillWriter& operator=(const KvSpillWriter&) = delete;

  // Appends a range; head h's `count * head_dim` elements (of the header's dtype) start
  // `h * head_stride` elements after `base`.
  common::Status AddRange(uint32_t layer, KvKind kind, int64_t begin, int64_t count, const void* base,
                          int64_t head_stride);
  // Writes the checksum and renames the file into place. Returns the file's size.
  common::StatusOr<uint64_t> Finish();

 private:
  KvSpillWriter(std::filesystem::path path, std::FILE* file, KvSpillHeader header);
  common::Status Write(const void* data, size_t bytes);

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  std::FILE* file_;
  KvSpillHeader header_;
  XXH3_state_t* hash_;
  uint64_t bytes_ = 0;
  bool finished_ = false;
};

// One range handed to the reader's sink: `data` is [heads, count, head_dim] elements of the
// header's dtype, valid during the call only.
struct KvSpillRange {
  uint32_t layer = 0;
  KvKind kind = KvKind::kKeys;
  int64_t begin = 0;
  int64_t count = 0;
  const void* data = nullptr;
};

// The number of positions the file at `path` claims to cover (from its header; nothing verified).
// NOT_FOUND when it does not exist, INTERNAL when it is too short to have a header.
common::StatusOr<int64_t> PeekKvSpillPositions(const std::filesystem::path& path);

// Checks `path` against `expected` (every header field) and its checksum and coverage, then calls
// `sink` for each range in file order. Nothing is passed to `sink` unless the whole file is valid.
// NOT_FOUND when the file does not exist; INTERNAL "damaged KV spill file ..." otherwise.
common::Status ReadKvSpill(const std::filesystem::path& path, const KvSpillHeader& expected,
                           const std::function<void(const KvSpillRange&)>& sink);

}  // namespace niels::daemon::state
