#include "daemon/formats/gguf_writer.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "daemon/formats/atomic_write.h"

namespace niels::daemon::formats {

using common::Status;

namespace {

template <typename T>
void Append(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian host, like the format
  out->append(bytes, sizeof(T));
}

void AppendString(std::string* out, std::string_view s) {
  Append<uint64_t>(out, s.size());
  out->append(s);
}

uint64_t Pad(uint64_t n, uint32_t alignment) { return (alignment - n % alignment) % alignment; }

}  // namespace

template <typename T>
GgufWriteValue GgufWriteValue::Scalar(GgufValueType type, T v) {
  std::string encoded;
  Append<T>(&encoded, v);
  return GgufWriteValue(type, std::move(encoded));
}

GgufWriteValue GgufWriteValue::U8(uint8_t v) { return Scalar(GgufValueType::kUint8, v); }
GgufWriteValue GgufWriteValue::I8(int8_t v) { return Scalar(GgufValueType::kInt8, v); }
GgufWriteValue GgufWriteValue::U16(uint16_t v) { return Scalar(GgufValueType::kUint16, v); }
GgufWriteValue GgufWriteValue::I16(int16_t v) { return Scalar(GgufValueType::kInt16, v); }
GgufWriteValue GgufWriteValue::U32(uint32_t v) { return Scalar(GgufValueType::kUint32, v); }
GgufWriteValue GgufWriteValue::I32(int32_t v) { return Scalar(GgufValueType::kInt32, v); }
GgufWriteValue GgufWriteValue::F32(float v) { return Scalar(GgufValueType::kFloat32, v); }
GgufWriteValue GgufWriteValue::Bool(bool v) { return Scalar<uint8_t>(GgufValueType::kBool, v ? 1 : 0); }
GgufWriteValue GgufWriteValue::U64(uint64_t v) { return Scalar(GgufValueType::kUint64, v); }
GgufWriteValue GgufWriteValue::I64(int64_t v) { return Scalar(GgufValueType::kInt64, v); }
GgufWriteValue GgufWriteValue::F64(double v) { return Scalar(GgufValueType::kFloat64, v); }

GgufWriteValue GgufWriteValue::String(std::string_view v) {
  std::string encoded;
  AppendString(&encoded, v);
  return GgufWriteValue(GgufValueType::kString, std::move(encoded));
}

GgufWriteValue GgufWriteValue::Array(GgufValueType element_type, const std::vector<GgufWriteValue>& items) {
  std::string encoded;
  Append<uint32_t>(&encoded, static_cast<uint32_t>(element_type));
  Append<uint64_t>(&encoded, items.size());
  for (const GgufWriteValue& item : items) {
    if (item.type_ != element_type) std::abort();  // REQUIRES violated
    encoded += item.encoded_;
  }
  return GgufWriteValue(GgufValueType::kArray, std::move(encoded));
}

GgufWriteValue GgufWriteValue::Copy(const GgufFile& file, const GgufValue& value) {
  // Every GgufValue's offset and size span exactly its encoding after the type tag.
  const char* begin = reinterpret_cast<const char*>(file.mapping_data()) + value.offset;
  return GgufWriteValue(value.type, std::string(begin, value.size));
}

GgufWriteValue GgufWriteValue::StringArray(const std::vector<std::string>& items) {
  std::string encoded;
  Append<uint32_t>(&encoded, static_cast<uint32_t>(GgufValueType::kString));
  Append<uint64_t>(&encoded, items.size());
  for (const std::string& item : items) AppendString(&encoded, item);
  return GgufWriteValue(GgufValueType::kArray, std::move(encoded));
}

GgufWriteValue GgufWriteValue::I32Array(const std::vector<int32_t>& items) {
  std::string encoded;
  Append<uint32_t>(&encoded, static_cast<uint32_t>(GgufValueType::kInt32));
  Append<uint64_t>(&encoded, items.size());
  for (int32_t item : items) Append(&encoded, item);
  return GgufWriteValue(GgufValueType::kArray, std::move(encoded));
}

GgufWriteValue GgufWriteValue::F32Array(const std::vector<float>& items) {
  std::string encoded;
  Append<uint32_t>(&encoded, static_cast<uint32_t>(GgufValueType::kFloat32));
  Append<uint64_t>(&encoded, items.size());
  for (float item : items) Append(&encoded, item);
  return GgufWriteValue(GgufValueType::kArray, std::move(encoded));
}

Status GgufWriter::AddMetadata(std::string_view key, const GgufWriteValue& value) {
  if (key.empty() || key.size() > kGgufMaxKeyLength) {
    return Status::InvalidArgument(
        fmt::format("metadata key of {} bytes (1 to {} allowed)", key.size(), kGgufMaxKeyLength));
  }
  if (keys_.count(std::string(key)) != 0)
    return Status::InvalidArgument(fmt::format("metadata key \"{}\" added twice", key));
  if (key == "general.alignment") {
    uint32_t alignment = 0;
    if (value.type() == GgufValueType::kUint32) std::memcpy(&alignment, value.encoded().data(), 4);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kGgufMaxAlignment) {
      return Status::InvalidArgument(
          fmt::format("general.alignment must be a UINT32 power of two of at most {}", kGgufMaxAlignment));
    }
    alignment_ = alignment;
  }
  keys_.insert(std::string(key));
  AppendString(&header_kv_, key);
  Append<uint32_t>(&header_kv_, static_cast<uint32_t>(value.type()));
  header_kv_ += value.encoded();
  ++kv_count_;
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string_view name, GgmlType type, const std::vector<int64_t>& dims,
                             const void* data) {
  if (name.empty() || name.size() > kGgufMaxTensorNameLength) {
    return Status::InvalidArgument(
        fmt::format("tensor name of {} bytes (1 to {} allowed)", name.size(), kGgufMaxTensorNameLength));
  }
  const std::string where = fmt::format("tensor \"{}\"", name);
  if (tensor_names_.count(std::string(name)) != 0) return Status::InvalidArgument(where + " added twice");
  if (dims.empty() || dims.size() > static_cast<size_t>(kGgufMaxDims)) {
    return Status::InvalidArgument(fmt::format("{}: {} dims (1 to {} allowed)", where, dims.size(), kGgufMaxDims));
  }
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(elements, d, &elements)) {
      return Status::InvalidArgument(where + ": a negative dim or too many elements");
    }
  }
  const std::optional<int64_t> bytes = GgmlTensorBytes(type, dims[0], elements);
  if (!bytes) {
    return Status::InvalidArgument(fmt::format("{}: rows of {} elements are not whole {} blocks of {}", where,
                                               dims[0], GgmlTypeName(type), GgmlTypeInfo(type).block_size));
  }
  tensor_names_.insert(std::string(name));
  tensors_.push_back(Tensor{std::string(name), type, dims, data, static_cast<uint64_t>(*bytes)});
  return Status::Ok();
}

std::string GgufWriter::HeaderBytes(std::vector<uint64_t>* offsets) const {
  std::string out = "GGUF";
  Append<uint32_t>(&out, 3);
  Append<uint64_t>(&out, tensors_.size());
  Append<uint64_t>(&out, kv_count_);
  out += header_kv_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    offset += Pad(offset, alignment_);
    offsets->push_back(offset);
    AppendString(&out, t.name);
    Append<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) Append<uint64_t>(&out, static_cast<uint64_t>(d));
    Append<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Append<uint64_t>(&out, offset);
    offset += t.size_bytes;
  }
  out.append(Pad(out.size(), alignment_), '\0');
  return out;
}

template <typename Sink>
void GgufWriter::Emit(Sink&& sink) const {
  std::vector<uint64_t> offsets;
  const std::string header = HeaderBytes(&offsets);
  sink(header.data(), header.size());
  uint64_t at = 0;  // bytes of the data section emitted so far
  const std::string zeros(alignment_, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    sink(zeros.data(), offsets[i] - at);  // padding < alignment
    if (tensors_[i].size_bytes > 0) sink(static_cast<const char*>(tensors_[i].data), tensors_[i].size_bytes);
    at = offsets[i] + tensors_[i].size_bytes;
  }
}

std::string GgufWriter::Serialize() const {
  std::string out;
  Emit([&out](const char* p, uint64_t n) { out.append(p, n); });
  return out;
}

Status GgufWriter::Write(const std::filesystem::path& path) const {
  return WriteFileAtomically(path, [this](std::ostream& out) {
    Emit([&out](const char* p, uint64_t n) { out.write(p, static_cast<std::streamsize>(n)); });
  });
}

}  // namespace niels::daemon::formats
