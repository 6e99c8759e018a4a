#pragma once
// SafetensorsFile: a read-only view of a .safetensors file through a private memory mapping.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
// then the data section; offsets are relative to the start of the data section.
//
// Open() validates everything before any tensor is touched, so a bad file can never make us read
// out of bounds; the header's JSON may nest at most common::kMaxJsonNesting levels
// (common/bounded_json.h). Data() points into the mapping, valid while the SafetensorsFile lives (Weights keep
// a shared_ptr to it). No libtorch. Immutable after Open(); const methods are safe from any thread.

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/formats/mapped_file.h"

namespace niels::daemon::formats {

// Every dtype of the safetensors format (so sizes can be validated); only F32/F16/BF16 are model
// weights.
enum class SafetensorsDtype { kBool, kU8, kI8, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64 };

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);  // "F32", ...
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);           // bytes per element
// "[3, 4]": a shape as error messages print it.
std::string ShapeString(const std::vector<int64_t>& shape);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range in the data section
  uint64_t end = 0;
};

class SafetensorsFile final : public MappedFile, public std::enable_shared_from_this<SafetensorsFile> {
 public:
  ~SafetensorsFile() override;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Maps and validates `path`. NOT_FOUND if it cannot be opened; INVALID_ARGUMENT (message starts
  // with the path) for: a file shorter than 8 bytes, a header length past the end of the file,
  // invalid header JSON, an entry without a valid dtype/shape/data_offsets, an unknown dtype, data
  // offsets past the end of the data section, a byte range that does not match shape * dtype size,
  // overlapping byte ranges. "__metadata__" is ignored; of a name repeated in the JSON, the last wins.
  static common::StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const override { return path_; }
  // Tensors in the order of their data offsets.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent. One hash lookup (the index by name is built once at Open): finding every
  // tensor of a header costs O(tensors), not O(tensors^2).
  const SafetensorsTensorInfo* Find(std::string_view name) const;

  // The first byte of the tensor's data in the mapping (any alignment; the mapping is private and
  // copy-on-write, but treat it as read-only). REQUIRES: info is one of tensors().
  const std::byte* Data(const SafetensorsTensorInfo& info) const;

  // OK while the file is as it was mapped. UNAVAILABLE when it was modified in place (size or
  // modification time changed): the mapping may then show other weights, or fault (SIGBUS) where the
  // file was truncated. Replacing the file by renaming a new one over it is safe (the mapping keeps
  // the old file) and is not reported.
  common::Status CheckUnchanged() const override;

  // The mapped bytes of the whole file (for zero-copy checks in tests).
  const std::byte* mapping_data() const override { return static_cast<const std::byte*>(mapping_); }
  size_t mapping_size() const override { return mapping_size_; }

 private:
  SafetensorsFile() = default;
  common::Status ParseHeader();

  std::filesystem::path path_;
  int fd_ = -1;                      // kept open to fstat the mapped file (CheckUnchanged)
  struct timespec mtime_ {};         // at Open()
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;  // name (a view of tensors_[i].name) -> i
};

// One tensor to write: numel(shape) elements of `dtype` at `data`, row-major.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes `tensors` as a safetensors file, in the given order, with the header padded to 8-byte
// alignment (so every tensor of the usual dtypes is aligned in a mapping). Writes a temporary file
// beside `path` and renames it over `path`, so a process that maps the old file (a running nielsd)
// keeps seeing it whole. INTERNAL on a write error. (tools/torch/torch_weights.h writes torch
// tensors through this.)
common::Status WriteSafetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors);

}  // namespace niels::daemon::formats
