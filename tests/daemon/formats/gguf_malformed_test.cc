// Malformed GGUF files: each is built byte by byte here (RawGguf, independent of GgufWriter) and
// must give INVALID_ARGUMENT naming the file, what is wrong and where; never a crash (the formats
// suite also runs under ASan+UBSan). Also: every truncation of a valid file is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "daemon/formats/gguf_file.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::formats {
namespace {

using common::StatusCode;

// Little-endian GGUF bytes, piece by piece.
class RawGguf {
 public:
  RawGguf& Magic(std::string_view m = "GGUF") { return Bytes(m); }
  RawGguf& U8(uint8_t v) { return Put(v); }
  RawGguf& U32(uint32_t v) { return Put(v); }
  RawGguf& U64(uint64_t v) { return Put(v); }
  RawGguf& Str(std::string_view s) { return U64(s.size()).Bytes(s); }
  RawGguf& Bytes(std::string_view s) {
    bytes_.append(s);
    return *this;
  }
  RawGguf& PadTo(size_t alignment) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    return *this;
  }
  // A key/value of a u32.
  RawGguf& KvU32(std::string_view key, uint32_t v) { return Str(key).U32(4).U32(v); }
  RawGguf& Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return Magic().U32(version).U64(tensors).U64(kvs);
  }
  RawGguf& TensorInfo(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  template <typename T>
  RawGguf& Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.append(b, sizeof(T));
    return *this;
  }
  std::string bytes_;
};

// One f32 tensor of 8 elements and one u32 key: the valid file the other cases break.
RawGguf ValidFile() {
  RawGguf g;
  g.Header(2, 1).KvU32("general.alignment", 32);
  g.TensorInfo("a", {8}, 0, 0).TensorInfo("b", {4, 2}, 0, 32).PadTo(32);
  g.Bytes(std::string(64, '\x01'));
  return g;
}

class GgufMalformedTest : public ::testing::Test {
 protected:
  // Opens `bytes` as a file; expects INVALID_ARGUMENT whose message holds every one of `parts`.
  void ExpectRefused(const std::string& bytes, std::vector<std::string> parts) {
    const auto path = dir_ / "bad.gguf";
    testing::WriteFile(path, bytes);
    auto f = GgufFile::Open(path);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    parts.push_back(path.string());
    for (const std::string& part : parts) {
      EXPECT_NE(f.status().message().find(part), std::string::npos)
          << "message: " << f.status().message() << "\nmissing: " << part;
    }
  }
  testing::TempDir dir_;
};

TEST_F(GgufMalformedTest, TheValidBaseOpens) {
  testing::WriteFile(dir_ / "ok.gguf", ValidFile().bytes());
  auto f = GgufFile::Open(dir_ / "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->data_offset(), ValidFile().bytes().size() - 64);
}

TEST_F(GgufMalformedTest, EveryTruncationIsRefused) {
  const std::string full = ValidFile().bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    ExpectRefused(full.substr(0, n), {});
  }
}

TEST_F(GgufMalformedTest, MagicVersionAndEndianness) {
  std::string bytes = ValidFile().bytes();
  ExpectRefused("GGUX" + bytes.substr(4), {"not a GGUF file", "at byte 0"});
  for (uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
    ExpectRefused(RawGguf().Header(0, 0, version).bytes(), {"version " + std::to_string(version), "at byte 4"});
  }
  ExpectRefused(RawGguf().Magic().U32(0x03000000).U64(0).U64(0).bytes(), {"big-endian"});
  ExpectRefused("", {"shorter than a GGUF header"});
}

TEST_F(GgufMalformedTest, VersionTwoIsRead) {
  std::string bytes = ValidFile().bytes();
  bytes[4] = 2;
  testing::WriteFile(dir_ / "v2.gguf", bytes);
  auto f = GgufFile::Open(dir_ / "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->version(), 2u);
}

TEST_F(GgufMalformedTest, HugeCounts) {
  ExpectRefused(RawGguf().Header(0, ~0ull).bytes(), {"key/values"});
  ExpectRefused(RawGguf().Header(~0ull, 0).bytes(), {"tensors"});
  ExpectRefused(RawGguf().Header(uint64_t{1} << 21, 0).Bytes(std::string(1 << 10, '\0')).bytes(), {"tensors"});
  // A string length and an array length beyond the file.
  ExpectRefused(RawGguf().Header(0, 1).U64(~0ull).Bytes(std::string(16, 'k')).bytes(),
                {"a metadata key", "at byte 24"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(8).U64(uint64_t{1} << 62).bytes(),
                {"key \"k\"", "at byte 37"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(4).U64(uint64_t{1} << 62).bytes(),
                {"key \"k\"", "array of 4611686018427387904 UINT32"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(8).U64(~0ull).bytes(),
                {"key \"k\"", "STRING elements"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(8).U64(2).Str("x").U64(1000).bytes(), {"key \"k\"[1]"});
}

// An array's claimed count is bounded by the bytes the file has left (at Open): 2^40 INT8s in a
// file of a few dozen bytes are refused before anything is allocated. GetIntArray and GetFloatArray
// widen every element to 8 bytes (an INT8 array of N bytes becomes 8 N), so they also take the
// count the caller can use and refuse a longer array before allocating: the result is at most 8 x
// max_count bytes, whatever the file holds.
TEST_F(GgufMalformedTest, WideningArraysAreBoundedByTheFileAndByTheCaller) {
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(1).U64(uint64_t{1} << 40).Bytes(std::string(16, '\1')).bytes(),
                {"key \"k\"", "array of 1099511627776 INT8", "but the file ends 16 bytes later"});
  constexpr uint64_t kCount = 1'000'000;
  const auto path = dir_ / "wide.gguf";
  testing::WriteFile(path, RawGguf()
                               .Header(0, 2)
                               .Str("int8s").U32(9).U32(1).U64(kCount).Bytes(std::string(kCount, '\x7f'))
                               .Str("f32s").U32(9).U32(6).U64(kCount).Bytes(std::string(4 * kCount, '\0'))
                               .bytes());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto ints = (*f)->GetIntArray("int8s", 1000);
  EXPECT_EQ(ints.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ints.status().message(), path.string() + ": key \"int8s\" holds 1000000 elements, more than the 1000 expected");
  const auto floats = (*f)->GetFloatArray("f32s", kCount - 1);
  EXPECT_EQ(floats.status().message(),
            path.string() + ": key \"f32s\" holds 1000000 elements, more than the 999999 expected");
  // At the caller's count: every element.
  const auto all_ints = (*f)->GetIntArray("int8s", kCount);
  ASSERT_TRUE(all_ints.ok()) << all_ints.status().ToString();
  EXPECT_EQ(all_ints->size(), kCount);
  EXPECT_EQ(all_ints->back(), 127);
  const auto all_floats = (*f)->GetFloatArray("f32s", kCount);
  ASSERT_TRUE(all_floats.ok()) << all_floats.status().ToString();
  EXPECT_EQ(all_floats->size(), kCount);
}

TEST_F(GgufMalformedTest, BadValues) {
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(13).U32(0).bytes(), {"key \"k\"", "unknown value type 13"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(99).U64(0).bytes(), {"unknown array element type 99"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(7).U8(2).bytes(), {"BOOL of value 2"});
  ExpectRefused(RawGguf().Header(0, 1).Str("k").U32(9).U32(7).U64(2).U8(1).U8(5).bytes(), {"element 1", "BOOL"});
  ExpectRefused(RawGguf().Header(0, 2).KvU32("k", 1).KvU32("k", 2).bytes(),
                {"key \"k\" appears twice", "at byte 41"});
  ExpectRefused(RawGguf().Header(0, 1).Str("").U32(4).U32(1).bytes(), {"empty metadata key"});
  // Arrays nested deeper than the limit.
  RawGguf deep;
  deep.Header(0, 1).Str("k").U32(9);
  for (int i = 0; i < kGgufMaxArrayDepth; ++i) deep.U32(9).U64(1);
  deep.U32(4).U64(0);
  ExpectRefused(deep.bytes(), {"nested deeper"});
}

TEST_F(GgufMalformedTest, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 21, 1u << 31}) {
    ExpectRefused(RawGguf().Header(0, 1).KvU32("general.alignment", a).bytes(),
                  {"general.alignment", "power of two"});
  }
  ExpectRefused(RawGguf().Header(0, 1).Str("general.alignment").U32(10).U64(32).bytes(), {"UINT64, not a UINT32"});
}

TEST_F(GgufMalformedTest, BadTensorInfos) {
  auto file = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, std::string name = "t") {
    return RawGguf()
        .Header(1, 0)
        .TensorInfo(name, dims, type, offset)
        .PadTo(32)
        .Bytes(std::string(64, '\0'))
        .bytes();
  };
  ExpectRefused(file({8}, 4, 0), {"tensor \"t\"", "unknown ggml type 4", "at byte"});
  ExpectRefused(file({8}, 42, 0), {"unknown ggml type 42"});
  ExpectRefused(file({}, 0, 0), {"0 dims"});
  ExpectRefused(file({1, 1, 1, 1, 1}, 0, 0), {"5 dims"});
  ExpectRefused(file({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0), {"overflow"});
  ExpectRefused(file({~0ull}, 0, 0), {"overflow"});
  ExpectRefused(file({16, 2}, 8, 0), {"not a whole number of q8_0's 32-element blocks"});
  ExpectRefused(file({8}, 0, 4), {"not a multiple of the alignment 32"});
  ExpectRefused(file({8}, 0, 64), {"run past the end"});
  ExpectRefused(file({8}, 0, ~0ull & ~uint64_t{31}), {"run past the end"});
  ExpectRefused(file({1024}, 0, 0), {"4096 bytes", "run past the end"});
  ExpectRefused(file({8}, 0, 0, std::string(64, 'x')), {"a tensor name is 64 bytes long"});
  ExpectRefused(file({8}, 0, 0, ""), {"an empty tensor name"});
  // Only an empty tensor, and the file ends before the (padded) data section would start.
  ExpectRefused(RawGguf().Header(1, 0).TensorInfo("e", {0}, 0, 0).bytes(),
                {"data section would start at byte 64"});
  ExpectRefused(RawGguf()
                    .Header(2, 0)
                    .TensorInfo("t", {8}, 0, 0)
                    .TensorInfo("t", {8}, 0, 32)
                    .PadTo(32)
                    .Bytes(std::string(64, '\0'))
                    .bytes(),
                {"tensor \"t\" appears twice"});
}

TEST_F(GgufMalformedTest, OverlappingTensors) {
  // b starts inside a (16 f32 = 64 bytes from 0); in either info order.
  for (bool a_first : {true, false}) {
    RawGguf g;
    g.Header(2, 0);
    if (a_first) g.TensorInfo("a", {16}, 0, 0);
    g.TensorInfo("b", {8}, 0, 32);
    if (!a_first) g.TensorInfo("a", {16}, 0, 0);
    g.PadTo(32).Bytes(std::string(64, '\0'));
    ExpectRefused(g.bytes(), {"tensor \"b\" (data offset 32) overlaps tensor \"a\""});
  }
  // Empty tensors overlap nothing.
  RawGguf ok;
  ok.Header(2, 0).TensorInfo("a", {16}, 0, 0).TensorInfo("e", {0}, 0, 32).PadTo(32).Bytes(std::string(64, '\0'));
  testing::WriteFile(dir_ / "ok.gguf", ok.bytes());
  EXPECT_TRUE(GgufFile::Open(dir_ / "ok.gguf").ok());
}

TEST_F(GgufMalformedTest, MissingAndSpecialFiles) {
  auto missing = GgufFile::Open(dir_ / "none.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(GgufFile::Open(dir_.path()).status().code(), StatusCode::kInvalidArgument);  // a directory
}

}  // namespace
}  // namespace niels::daemon::formats
