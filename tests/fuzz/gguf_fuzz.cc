// Fuzz target: the GGUF reader (daemon/formats/gguf_file.h), and the writer on what it accepted.
//
// Input: the bytes of a GGUF file, put in a memfd and opened through /proc/self/fd, so Open() maps
// it exactly as it maps a real file.
// Invariants of an accepted file: every tensor's data lies inside the file, after the data
// section's start, aligned, without overlapping another tensor's, and has the byte size the ggml
// type table gives for its dims; every metadata value can be walked (nested arrays included) and
// read through the typed accessors without a crash (ASan checks the reads stay inside the
// mapping). Writing the accepted file again with GgufWriter (same metadata in order, same tensors)
// and reading that back gives the same keys, values, tensor infos and tensor bytes; each value built
// again by GgufWriteValue's factories encodes to the very bytes of the file (GgufWriteValue::Copy).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/formats/gguf_file.h"
#include "daemon/formats/gguf_writer.h"
#include "tests/fuzz/fuzz_util.h"

namespace formats = niels::daemon::formats;
using formats::GgufValue;
using formats::GgufValueType;
using formats::GgufWriteValue;

namespace {

// A memfd holding `bytes`; its /proc/self/fd path is what Open() gets.
struct MemFile {
  explicit MemFile(const void* bytes, size_t size) {
    fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    size_t written = 0;
    while (written < size) {
      const ssize_t n = write(fd, static_cast<const char*>(bytes) + written, size - written);
      FUZZ_CHECK(n > 0);
      written += static_cast<size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemFile() { close(fd); }
  int fd = -1;
  std::string path;
};

// The value again, for the writer (recursively for arrays).
GgufWriteValue Rewrite(const formats::GgufFile& file, const GgufValue& v) {
  auto load = [&v](auto zero) {
    std::memcpy(&zero, v.data, sizeof(zero));
    return zero;
  };
  switch (v.type) {
    case GgufValueType::kUint8: return GgufWriteValue::U8(load(uint8_t{}));
    case GgufValueType::kInt8: return GgufWriteValue::I8(load(int8_t{}));
    case GgufValueType::kUint16: return GgufWriteValue::U16(load(uint16_t{}));
    case GgufValueType::kInt16: return GgufWriteValue::I16(load(int16_t{}));
    case GgufValueType::kUint32: return GgufWriteValue::U32(load(uint32_t{}));
    case GgufValueType::kInt32: return GgufWriteValue::I32(load(int32_t{}));
    case GgufValueType::kFloat32: return GgufWriteValue::F32(load(float{}));
    case GgufValueType::kBool: return GgufWriteValue::Bool(load(uint8_t{}) != 0);
    case GgufValueType::kUint64: return GgufWriteValue::U64(load(uint64_t{}));
    case GgufValueType::kInt64: return GgufWriteValue::I64(load(int64_t{}));
    case GgufValueType::kFloat64: return GgufWriteValue::F64(load(double{}));
    case GgufValueType::kString:
      return GgufWriteValue::String(std::string_view(reinterpret_cast<const char*>(v.data), v.count));
    case GgufValueType::kArray: {
      std::vector<GgufWriteValue> items;
      for (const GgufValue& e : file.ArrayElements(v)) items.push_back(Rewrite(file, e));
      return GgufWriteValue::Array(v.element_type, items);
    }
  }
  FUZZ_CHECK(false);
  return GgufWriteValue::U8(0);
}

// Walks every value through the accessors; checks the walk agrees with the parser's sizes.
void ReadAllMetadata(const formats::GgufFile& f) {
  for (const formats::GgufKeyValue& kv : f.metadata()) {
    FUZZ_CHECK(f.FindKey(kv.key) == &kv);
    FUZZ_CHECK(kv.value.offset + kv.value.size <= f.file_size());
    (void)f.GetString(kv.key);
    (void)f.GetBool(kv.key);
    (void)f.GetUint(kv.key);
    (void)f.GetInt(kv.key);
    (void)f.GetFloat(kv.key);
    (void)f.GetStringArray(kv.key);
    (void)f.GetIntArray(kv.key, kv.value.count);
    (void)f.GetFloatArray(kv.key, kv.value.count);
    if (kv.value.type == GgufValueType::kArray) {
      uint64_t size = 12;
      for (const GgufValue& e : f.ArrayElements(kv.value)) size += e.size;
      FUZZ_CHECK(size == kv.value.size);
    }
  }
}

void CheckTensors(const formats::GgufFile& f) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const formats::GgufTensorInfo& t : f.tensors()) {
    FUZZ_CHECK(f.FindTensor(t.name) == &t);
    FUZZ_CHECK(t.offset % f.alignment() == 0);
    const formats::GgmlTypeTraits& traits = formats::GgmlTypeInfo(t.type);
    FUZZ_CHECK(t.elements == 0 || t.dims[0] % traits.block_size == 0);
    FUZZ_CHECK(static_cast<__int128>(t.size_bytes) * traits.block_size ==
               static_cast<__int128>(t.elements) * traits.type_size);
    FUZZ_CHECK(f.data_offset() + t.offset + t.size_bytes <= f.file_size());
    volatile uint8_t sum = 0;  // reads every byte
    const std::byte* p = f.TensorData(t);
    for (uint64_t i = 0; i < t.size_bytes; ++i) sum = sum + static_cast<uint8_t>(p[i]);
    if (t.size_bytes > 0) ranges.emplace_back(t.offset, t.offset + t.size_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first);
}

// Writes `f` again and checks the copy reads back the same.
void CheckRewrite(const formats::GgufFile& f) {
  formats::GgufWriter writer;
  for (const formats::GgufKeyValue& kv : f.metadata()) {
    const GgufWriteValue value = Rewrite(f, kv.value);
    FUZZ_CHECK(value.encoded() == GgufWriteValue::Copy(f, kv.value).encoded());  // factories == file bytes
    FUZZ_CHECK(writer.AddMetadata(kv.key, value).ok());
  }
  for (const formats::GgufTensorInfo& t : f.tensors()) {
    FUZZ_CHECK(
        writer.AddTensor(t.name, t.type, std::vector<int64_t>(t.dims, t.dims + t.n_dims), f.TensorData(t)).ok());
  }
  const std::string bytes = writer.Serialize();
  MemFile copy(bytes.data(), bytes.size());
  auto g = formats::GgufFile::Open(copy.path);
  FUZZ_CHECK(g.ok());
  FUZZ_CHECK((*g)->metadata().size() == f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    const auto& a = f.metadata()[i];
    const auto& b = (*g)->metadata()[i];
    FUZZ_CHECK(a.key == b.key && a.value.type == b.value.type && a.value.size == b.value.size);
    FUZZ_CHECK(std::memcmp(a.value.data, b.value.data,
                           a.value.type == GgufValueType::kArray    ? a.value.size - 12
                           : a.value.type == GgufValueType::kString ? a.value.count
                                                                    : a.value.size) == 0);
  }
  FUZZ_CHECK((*g)->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = (*g)->tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.n_dims == b.n_dims && a.size_bytes == b.size_bytes);
    FUZZ_CHECK(std::equal(a.dims, a.dims + 4, b.dims));
    FUZZ_CHECK(std::memcmp(f.TensorData(a), (*g)->TensorData(b), a.size_bytes) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemFile input(data, size);
  auto file = formats::GgufFile::Open(input.path);
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == niels::common::StatusCode::kInvalidArgument);
    FUZZ_CHECK(file.status().message().rfind(input.path, 0) == 0);  // names the file
    return 0;
  }
  const formats::GgufFile& f = **file;
  FUZZ_CHECK(f.version() == 2 || f.version() == 3);
  FUZZ_CHECK(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  FUZZ_CHECK(f.data_offset() % f.alignment() == 0);
  ReadAllMetadata(f);
  CheckTensors(f);
  CheckRewrite(f);
  return 0;
}
