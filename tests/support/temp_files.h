#pragma once
// Torch-free test helpers for files: temp dirs and the low-level writers that malformed-input tests
// use to produce broken files. Part of niels_test_base (no libtorch, no SentencePiece), so the
// server, client and sanitizer suites can use it.
//
// Failures throw std::runtime_error, which GoogleTest reports as a test failure. Thread-safe.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace niels::testing {

// Creates a fresh, empty directory /tmp/<prefix>XXXXXX and returns its path (not removed).
std::filesystem::path MakeTempDir(std::string_view prefix = "niels_test_");

// A fresh temp dir (MakeTempDir) removed recursively when the object is destroyed.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "niels_test_");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / name.
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void WriteFile(const std::filesystem::path& file, std::string_view bytes);
std::string ReadFile(const std::filesystem::path& file);

// Writes a safetensors file from raw parts: an 8-byte little-endian header length (`header_length`,
// default header_json.size()), the header text, then `data` verbatim.
void WriteRawSafetensors(const std::filesystem::path& file, std::string_view header_json,
                         std::string_view data, std::optional<uint64_t> header_length = std::nullopt);

}  // namespace niels::testing
