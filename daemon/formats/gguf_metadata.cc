// GgufFile's metadata accessors (gguf_file.cc parses and validates the file).
#include <fmt/format.h>

#include <limits>

#include "daemon/formats/gguf_encoding.h"
#include "daemon/formats/gguf_file.h"

namespace niels::daemon::formats {

using common::Status;
using common::StatusOr;
using gguf_internal::FixedSize;
using gguf_internal::Integer;
using gguf_internal::IsInteger;
using gguf_internal::Load;
using gguf_internal::ReadInteger;

std::vector<GgufValue> GgufFile::ArrayElements(const GgufValue& value) const {
  std::vector<GgufValue> out;
  out.reserve(value.count);  // validated against the file's size at Open()
  const int size = FixedSize(static_cast<uint32_t>(value.element_type));
  const std::byte* p = value.data;
  for (uint64_t i = 0; i < value.count; ++i) {
    GgufValue e;
    e.type = value.element_type;
    e.offset = static_cast<uint64_t>(p - mapping_);
    if (size > 0) {
      e.data = p;
      e.size = static_cast<uint64_t>(size);
    } else if (e.type == GgufValueType::kString) {
      e.count = Load<uint64_t>(p);
      e.data = p + 8;
      e.size = 8 + e.count;
    } else {
      e.element_type = static_cast<GgufValueType>(Load<uint32_t>(p));
      e.count = Load<uint64_t>(p + 4);
      e.data = p + 12;
      const std::vector<GgufValue> inner = ArrayElements(e);  // its size: the sum of its elements'
      e.size = 12;
      for (const GgufValue& x : inner) e.size += x.size;
    }
    p += e.size;
    out.push_back(e);
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Typed metadata accessors

Status GgufFile::TypeError(const GgufKeyValue& kv, std::string_view wanted) const {
  std::string type(GgufValueTypeName(kv.value.type));
  if (kv.value.type == GgufValueType::kArray)
    type += fmt::format(" of {}", GgufValueTypeName(kv.value.element_type));
  return Status::InvalidArgument(fmt::format("{}: key \"{}\" (at byte {}) is {}, expected {}", path_.string(),
                                             kv.key, kv.offset, type, wanted));
}

StatusOr<const GgufKeyValue*> GgufFile::Lookup(std::string_view key) const {
  const GgufKeyValue* kv = FindKey(key);
  if (kv == nullptr) return Status::NotFound(fmt::format("{}: no metadata key \"{}\"", path_.string(), key));
  return kv;
}

StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  if ((*kv)->value.type != GgufValueType::kString) return TypeError(**kv, "a STRING");
  return std::string_view(reinterpret_cast<const char*>((*kv)->value.data), (*kv)->value.count);
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  if ((*kv)->value.type != GgufValueType::kBool) return TypeError(**kv, "a BOOL");
  return static_cast<uint8_t>(*(*kv)->value.data) != 0;
}

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  if (!IsInteger((*kv)->value.type)) return TypeError(**kv, "an integer");
  const Integer v = ReadInteger((*kv)->value.type, (*kv)->value.data);
  if (v.negative) {
    return Status::InvalidArgument(fmt::format("{}: key \"{}\" (at byte {}) is -{}, expected a value >= 0",
                                               path_.string(), key, (*kv)->offset, v.magnitude));
  }
  return v.magnitude;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  if (!IsInteger((*kv)->value.type)) return TypeError(**kv, "an integer");
  const Integer v = ReadInteger((*kv)->value.type, (*kv)->value.data);
  if (!v.negative && v.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument(fmt::format("{}: key \"{}\" (at byte {}) is {}, more than int64 holds",
                                               path_.string(), key, (*kv)->offset, v.magnitude));
  }
  return v.negative ? static_cast<int64_t>(uint64_t{0} - v.magnitude) : static_cast<int64_t>(v.magnitude);
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  if ((*kv)->value.type == GgufValueType::kFloat32) return static_cast<double>(Load<float>((*kv)->value.data));
  if ((*kv)->value.type == GgufValueType::kFloat64) return Load<double>((*kv)->value.data);
  return TypeError(**kv, "a FLOAT32 or FLOAT64");
}

StatusOr<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  const GgufValue& v = (*kv)->value;
  if (v.type != GgufValueType::kArray || v.element_type != GgufValueType::kString) {
    return TypeError(**kv, "an ARRAY of STRING");
  }
  std::vector<std::string_view> out;
  out.reserve(v.count);
  const std::byte* p = v.data;
  for (uint64_t i = 0; i < v.count; ++i) {
    const uint64_t length = Load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), length);
    p += 8 + length;
  }
  return out;
}

Status GgufFile::ArrayLongerThan(const GgufKeyValue& kv, uint64_t max_count) const {
  return Status::InvalidArgument(fmt::format("{}: key \"{}\" holds {} elements, more than the {} expected",
                                             path_.string(), kv.key, kv.value.count, max_count));
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key, uint64_t max_count) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  const GgufValue& v = (*kv)->value;
  if (v.type != GgufValueType::kArray || !IsInteger(v.element_type))
    return TypeError(**kv, "an ARRAY of integers");
  // Before anything is allocated: the result takes 8 bytes per element, an INT8 array 1 in the file.
  if (v.count > max_count) return ArrayLongerThan(**kv, max_count);
  const int size = FixedSize(static_cast<uint32_t>(v.element_type));
  std::vector<int64_t> out;
  out.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    const Integer x = ReadInteger(v.element_type, v.data + i * static_cast<uint64_t>(size));
    if (!x.negative && x.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(fmt::format("{}: key \"{}\": element {} is {}, more than int64 holds",
                                                 path_.string(), key, i, x.magnitude));
    }
    out.push_back(x.negative ? static_cast<int64_t>(uint64_t{0} - x.magnitude)
                             : static_cast<int64_t>(x.magnitude));
  }
  return out;
}

StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key, uint64_t max_count) const {
  StatusOr<const GgufKeyValue*> kv = Lookup(key);
  if (!kv.ok()) return kv.status();
  const GgufValue& v = (*kv)->value;
  const bool f32 = v.element_type == GgufValueType::kFloat32;
  if (v.type != GgufValueType::kArray || !(f32 || v.element_type == GgufValueType::kFloat64)) {
    return TypeError(**kv, "an ARRAY of FLOAT32 or FLOAT64");
  }
  if (v.count > max_count) return ArrayLongerThan(**kv, max_count);
  std::vector<double> out;
  out.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    out.push_back(f32 ? static_cast<double>(Load<float>(v.data + 4 * i)) : Load<double>(v.data + 8 * i));
  }
  return out;
}

}  // namespace niels::daemon::formats
