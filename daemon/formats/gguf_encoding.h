#pragma once
// Internal to daemon/formats: decoding helpers shared by the GGUF reader and writer. Not a public
// interface; include only from daemon/formats/*.cc.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "daemon/formats/gguf_file.h"

namespace niels::daemon::formats::gguf_internal {

template <typename T>
inline T Load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // the format is little-endian, and so are we (x86-64, arm64)
  return value;
}

// Bytes of one element of a fixed-size value type; 0 for STRING and ARRAY, -1 for unknown types.
inline int FixedSize(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return -1;
}

inline bool IsInteger(GgufValueType t) {
  return FixedSize(static_cast<uint32_t>(t)) > 0 && t != GgufValueType::kBool && t != GgufValueType::kFloat32 &&
         t != GgufValueType::kFloat64;
}

// An integer value as int64 or uint64 (exactly one of them is meaningful per `negative`).
struct Integer {
  bool negative = false;
  uint64_t magnitude = 0;  // the value when !negative; its absolute value otherwise
};

inline Integer ReadInteger(GgufValueType type, const std::byte* p) {
  auto signed_value = [](int64_t v) {
    return v < 0 ? Integer{true, uint64_t{0} - static_cast<uint64_t>(v)}
                 : Integer{false, static_cast<uint64_t>(v)};
  };
  switch (type) {
    case GgufValueType::kUint8: return {false, Load<uint8_t>(p)};
    case GgufValueType::kUint16: return {false, Load<uint16_t>(p)};
    case GgufValueType::kUint32: return {false, Load<uint32_t>(p)};
    case GgufValueType::kUint64: return {false, Load<uint64_t>(p)};
    case GgufValueType::kInt8: return signed_value(Load<int8_t>(p));
    case GgufValueType::kInt16: return signed_value(Load<int16_t>(p));
    case GgufValueType::kInt32: return signed_value(Load<int32_t>(p));
    case GgufValueType::kInt64: return signed_value(Load<int64_t>(p));
    default: return {};
  }
}

}  // namespace niels::daemon::formats::gguf_internal
