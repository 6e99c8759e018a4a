#pragma once
// GgufFile: a read-only view of a GGUF file (llama.cpp's model format, versions 2 and 3) through a
// read-only memory mapping. Tensor data is never copied: TensorData() points into the mapping.
//
// Layout (little-endian; the GGUF specification, github.com/ggml-org/ggml file docs/gguf.md):
// "GGUF", u32 version, u64 tensor count, u64
// key/value count; the key/values (string key, u32 value type, value); the tensor infos (string
// name, u32 n_dims, n_dims x u64 dims, u32 ggml type, u64 offset); padding to `general.alignment`
// (default 32); the data section, in which every tensor's offset (relative to the data section's
// start) is a multiple of the alignment. A string is a u64 byte length and that many bytes (no
// terminator); an array is a u32 element type, a u64 count and the elements.
//
// Open() validates the whole header against the file's size before anything is used: counts,
// string lengths, array lengths and nesting depth are bounded by the bytes that remain (so a
// hostile count cannot make us allocate more than a small multiple of the file's size) and by the
// limits below; keys and tensor names must be unique; value and ggml types must be known; a
// tensor has 1 to 4 dims, none negative, whose product fits int64; its row length (dims[0]) must be
// a whole number of its type's blocks; a BOOL is 0 or 1; general.alignment must be a u32 power of
// two of at most 1 MiB; every tensor's data must be aligned, inside the file and not overlap
// another's.
//
// Dims: GGUF lists a tensor's dims fastest-varying first (ggml's ne[0], ne[1], ...): a matrix of
// `rows` rows of `cols` elements has dims {cols, rows}. GgufTensorInfo keeps that order in `dims`;
// Shape() gives the row-major shape (outermost first, like safetensors, numpy and PyTorch).
//
// Immutable after Open(); const methods are safe from any thread. Strings handed out
// (std::string_view) point into the mapping and are valid while the GgufFile lives.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "daemon/formats/ggml_type.h"
#include "daemon/formats/mapped_file.h"

namespace niels::daemon::formats {

// GGUF metadata value types (gguf_type in ggml).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "UINT8", ..., "ARRAY"; "?" for a value outside the enum.
std::string_view GgufValueTypeName(GgufValueType type);

// Limits on what a file may declare (beyond what its size allows).
inline constexpr uint64_t kGgufMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxKeyValues = uint64_t{1} << 20;
inline constexpr uint64_t kGgufMaxKeyLength = 65535;      // the GGUF spec's limit
inline constexpr uint64_t kGgufMaxTensorNameLength = 63;  // ggml's GGML_MAX_NAME (64) with its NUL
inline constexpr int kGgufMaxArrayDepth = 4;              // arrays of arrays of ... of values
inline constexpr int kGgufMaxDims = 4;                    // ggml's GGML_MAX_DIMS
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxAlignment = uint32_t{1} << 20;  // real files use 32 (some 64)

// One metadata value, a view into the mapping. For arrays, ArrayElements() lists the elements.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Arrays only: the type of the elements.
  GgufValueType element_type = GgufValueType::kUint8;
  // Arrays: number of elements; strings: bytes of text.
  uint64_t count = 0;
  // Scalars: the value's bytes; strings: the text; arrays: the first element.
  const std::byte* data = nullptr;
  // Bytes of the encoding after the type tag (a string's length field and an array's element type
  // and count included), which starts at byte `offset` of the file.
  uint64_t size = 0;
  uint64_t offset = 0;
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
  uint64_t offset = 0;  // byte offset of the key/value in the file
};

struct GgufTensorInfo {
  std::string_view name;
  GgmlType type = GgmlType::kF32;
  int n_dims = 0;
  int64_t dims[kGgufMaxDims] = {1, 1, 1, 1};  // GGUF order: dims[0] varies fastest; 1 past n_dims
  uint64_t offset = 0;                        // relative to the data section's start; a multiple of the alignment
  int64_t elements = 0;                       // product of the dims
  uint64_t size_bytes = 0;                    // elements / block_size * type_size
  uint64_t info_offset = 0;                   // byte offset of the tensor info in the file (for messages)

  // Row-major shape, outermost dimension first: {dims[n_dims-1], ..., dims[0]}.
  std::vector<int64_t> Shape() const;
};

class GgufFile final : public MappedFile {
 public:
  ~GgufFile() override;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Maps and validates `path`. NOT_FOUND when it cannot be opened; INVALID_ARGUMENT for anything
  // malformed (see the file comment), with a message that starts with the path and names the key
  // or tensor and the byte offset where the problem is; INTERNAL when mmap fails.
  static common::StatusOr<std::shared_ptr<const GgufFile>> Open(const std::filesystem::path& path);

  const std::filesystem::path& path() const override { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufKeyValue* FindKey(std::string_view key) const;

  // Typed accessors. Each returns NOT_FOUND when the key is absent and INVALID_ARGUMENT (naming the
  // key, its type and the wanted type) when it holds something else.
  // GetString: a STRING. GetBool: a BOOL.
  common::StatusOr<std::string_view> GetString(std::string_view key) const;
  common::StatusOr<bool> GetBool(std::string_view key) const;
  // GetUint: any integer type whose value is >= 0. GetInt: any integer type whose value fits int64.
  common::StatusOr<uint64_t> GetUint(std::string_view key) const;
  common::StatusOr<int64_t> GetInt(std::string_view key) const;
  // GetFloat: FLOAT32 or FLOAT64 (integers are refused: a float key written as one is a bug).
  common::StatusOr<double> GetFloat(std::string_view key) const;
  // Arrays: GetStringArray of STRINGs; GetIntArray of any integer type (each value must fit
  // int64); GetFloatArray of FLOAT32 or FLOAT64. The element count is bounded by the file (checked
  // at Open), but the result widens each element (an INT8 to 8 bytes, a FLOAT32 to 8), so the
  // caller says how many it can use: INVALID_ARGUMENT "<file>: key "<key>" holds N elements, more
  // than the M expected" when the array is longer than `max_count`, before anything is allocated.
  common::StatusOr<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  common::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key, uint64_t max_count) const;
  common::StatusOr<std::vector<double>> GetFloatArray(std::string_view key, uint64_t max_count) const;

  // The elements of an array value, in order (nested arrays are again GgufValues).
  // REQUIRES: value.type == kArray and `value` comes from this file.
  std::vector<GgufValue> ArrayElements(const GgufValue& value) const;

  // Tensors in file order (the order of their infos).
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The first byte of the tensor's data in the mapping, aligned to alignment() (the mapping starts
  // on a page). REQUIRES: info is one of tensors().
  const std::byte* TensorData(const GgufTensorInfo& info) const;

  // MappedFile: the mapped bytes of the whole file; whether it is still as it was mapped.
  const std::byte* mapping_data() const override { return mapping_; }
  size_t mapping_size() const override { return static_cast<size_t>(size_); }
  common::Status CheckUnchanged() const override;

 private:
  class Parser;
  GgufFile() = default;

  common::Status TypeError(const GgufKeyValue& kv, std::string_view wanted) const;
  common::Status ArrayLongerThan(const GgufKeyValue& kv, uint64_t max_count) const;
  common::StatusOr<const GgufKeyValue*> Lookup(std::string_view key) const;

  std::filesystem::path path_;
  const std::byte* mapping_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;               // kept open to fstat the mapped file (CheckUnchanged)
  struct timespec mtime_ {};  // at Open()
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// A metadata value that may be absent (GgufFile's getters answer NOT_FOUND for a missing key):
// nullopt then; a present value, or the error for a value of the wrong type, as it is.
template <typename T>
common::StatusOr<std::optional<T>> OptionalKey(common::StatusOr<T> value) {
  if (value.ok()) return std::optional<T>(std::move(value).value());
  if (value.status().code() == common::StatusCode::kNotFound) return std::optional<T>();
  return value.status();
}

// A metadata value that must be present: NOT_FOUND becomes INVALID_ARGUMENT "FILE: missing
// metadata key "KEY"" followed by `why` (when not empty); anything else as it is.
template <typename T>
common::StatusOr<T> RequiredKey(common::StatusOr<T> value, const GgufFile& file, std::string_view key,
                                std::string_view why = {}) {
  if (!value.ok() && value.status().code() == common::StatusCode::kNotFound) {
    std::string message = file.path().string() + ": missing metadata key \"" + std::string(key) + "\"";
    if (!why.empty()) message += " (" + std::string(why) + ")";
    return common::Status::InvalidArgument(std::move(message));
  }
  return value;
}

}  // namespace niels::daemon::formats
