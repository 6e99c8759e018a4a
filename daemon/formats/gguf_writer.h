#pragma once
// GgufWriter: writes a GGUF version 3 file (layout in gguf_file.h): metadata of every GGUF value
// type, then tensors of any ggml type, each at an offset aligned to the file's alignment.
//
// Metadata is added as GgufWriteValue, an encoded value built by its factories (scalars, strings,
// arrays of any element type including strings and arrays). Tensor data is NOT copied: AddTensor
// keeps the caller's pointer, which must stay valid until Write()/Serialize() returns. A caller that
// produces tensor data as it writes (a quantizer streaming tensor by tensor) adds tensors without
// data and writes HeaderBytes() followed by each tensor's bytes at its offset itself.
//
// The alignment is `general.alignment` when the caller adds that key (a UINT32 power of two, at
// most kGgufMaxAlignment),
// else 32. Tensors are laid out in the order they were added; the data section and every tensor
// start on a multiple of the alignment, with zero padding between (none after the last tensor).
// Not thread-safe; use one writer per file.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "daemon/formats/ggml_type.h"
#include "daemon/formats/gguf_file.h"

namespace niels::daemon::formats {

// One encoded metadata value (what follows the value type tag in the file).
class GgufWriteValue {
 public:
  static GgufWriteValue U8(uint8_t v);
  static GgufWriteValue I8(int8_t v);
  static GgufWriteValue U16(uint16_t v);
  static GgufWriteValue I16(int16_t v);
  static GgufWriteValue U32(uint32_t v);
  static GgufWriteValue I32(int32_t v);
  static GgufWriteValue F32(float v);
  static GgufWriteValue Bool(bool v);
  static GgufWriteValue String(std::string_view v);
  static GgufWriteValue U64(uint64_t v);
  static GgufWriteValue I64(int64_t v);
  static GgufWriteValue F64(double v);
  // An array of `element_type` values. REQUIRES: every item has type `element_type`.
  static GgufWriteValue Array(GgufValueType element_type, const std::vector<GgufWriteValue>& items);
  // The value `value` of `file` as it is encoded there (a key/value copied from a file read, e.g. by
  // a quantizer). REQUIRES: `value` comes from `file` (metadata() or ArrayElements()).
  static GgufWriteValue Copy(const GgufFile& file, const GgufValue& value);
  // Shorthands for the common arrays.
  static GgufWriteValue StringArray(const std::vector<std::string>& items);
  static GgufWriteValue I32Array(const std::vector<int32_t>& items);
  static GgufWriteValue F32Array(const std::vector<float>& items);

  GgufValueType type() const { return type_; }
  const std::string& encoded() const { return encoded_; }

 private:
  GgufWriteValue(GgufValueType type, std::string encoded) : type_(type), encoded_(std::move(encoded)) {}
  template <typename T>
  static GgufWriteValue Scalar(GgufValueType type, T v);

  GgufValueType type_;
  std::string encoded_;
};

class GgufWriter {
 public:
  GgufWriter() = default;
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Adds a key/value (in order). INVALID_ARGUMENT for an empty key, a key longer than
  // kGgufMaxKeyLength, a key added before, or a general.alignment that is not a UINT32 power of
  // two of at most kGgufMaxAlignment.
  common::Status AddMetadata(std::string_view key, const GgufWriteValue& value);

  // Adds a tensor. `dims` in GGUF order (dims[0] varies fastest: a rows x cols matrix is
  // {cols, rows}); `data` holds its bytes (elements / block_size * type_size), kept by pointer, or
  // is nullptr when the caller writes the data itself after HeaderBytes() (then Serialize() and
  // Write() must not be called).
  // INVALID_ARGUMENT for an empty name, a name longer than kGgufMaxTensorNameLength, a name added
  // before, 0 or more than 4 dims, a negative dim, rows that are not whole blocks of `type`, or an
  // element count that overflows.
  common::Status AddTensor(std::string_view name, GgmlType type, const std::vector<int64_t>& dims,
                           const void* data);

  // The whole file in memory.
  std::string Serialize() const;
  // Writes the file (streamed, tensor data straight from the callers' buffers) to a temporary name
  // beside `path` and renames it over `path`. INTERNAL on an
  // I/O error (nothing is left behind).
  common::Status Write(const std::filesystem::path& path) const;

  // Everything before the data section: the header, the key/values, the tensor infos and the
  // padding to the alignment. offsets[i] receives tensor i's offset in the data section (in the
  // order added): its bytes go at file offset HeaderBytes().size() + offsets[i], zeros between.
  std::string HeaderBytes(std::vector<uint64_t>* offsets) const;

  uint32_t alignment() const { return alignment_; }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    const void* data;
    uint64_t size_bytes;
  };

  // Hands the file's bytes to sink(const char*, uint64_t) in order.
  template <typename Sink>
  void Emit(Sink&& sink) const;

  std::string header_kv_;  // the encoded key/values
  uint64_t kv_count_ = 0;
  std::unordered_set<std::string> keys_;
  std::unordered_set<std::string> tensor_names_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = kGgufDefaultAlignment;
};

}  // namespace niels::daemon::formats
