#include "daemon/formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/formats/atomic_write.h"

namespace niels::daemon::formats {
namespace {

using common::Status;
using common::StatusOr;
using Json = nlohmann::json;

struct DtypeEntry {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<DtypeEntry, 13> kDtypes = {{
    {SafetensorsDtype::kBool, "BOOL", 1}, {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},     {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},   {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},   {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},   {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
}};

const DtypeEntry* FindDtype(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// Parses one header entry (everything but the byte-range checks against the file).
Status ParseEntry(const std::string& file, const std::string& name, const Json& entry,
                  SafetensorsTensorInfo* info) {
  const std::string where = file + ": tensor " + name;
  if (!entry.is_object()) return Status::InvalidArgument(where + ": header entry is not an object");
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return Status::InvalidArgument(where + ": missing or non-string \"dtype\"");
  }
  const DtypeEntry* dtype = FindDtype(dtype_it->get<std::string>());
  if (dtype == nullptr) {
    return Status::InvalidArgument(where + ": unknown dtype \"" + dtype_it->get<std::string>() + "\"");
  }
  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return Status::InvalidArgument(where + ": missing or non-array \"shape\"");
  }
  uint64_t numel = 1;
  for (const Json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
      return Status::InvalidArgument(where + ": \"shape\" must hold non-negative integers");
    }
    info->shape.push_back(d.get<int64_t>());
    numel = info->shape.back() == 0 ? 0 : numel;
    if (numel != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / d.get<uint64_t>()) {
      return Status::InvalidArgument(where + ": shape " + ShapeString(info->shape) + " is too large");
    }
    numel *= d.get<uint64_t>();
  }
  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return Status::InvalidArgument(where + ": \"data_offsets\" must be two non-negative integers");
  }
  info->name = name;
  info->dtype = dtype->dtype;
  info->begin = (*offsets_it)[0].get<uint64_t>();
  info->end = (*offsets_it)[1].get<uint64_t>();
  if (info->begin > info->end) {
    return Status::InvalidArgument(where + ": data_offsets [" + std::to_string(info->begin) + ", " +
                                   std::to_string(info->end) + "] are reversed");
  }
  const uint64_t expected = numel * static_cast<uint64_t>(dtype->size);
  if (info->end - info->begin != expected) {
    return Status::InvalidArgument(where + ": data_offsets [" + std::to_string(info->begin) + ", " +
                                   std::to_string(info->end) + "] span " +
                                   std::to_string(info->end - info->begin) + " bytes, but shape " +
                                   ShapeString(info->shape) + " of " + std::string(dtype->name) +
                                   " needs " + std::to_string(expected));
  }
  return Status::Ok();
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsFile::CheckUnchanged() const { return CheckFileUnchanged(fd_, mtime_, mapping_size_, path_); }

StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(const std::filesystem::path& path) {
  const std::string file = path.string();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(file + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(file + ": not a regular file");
  }
  std::shared_ptr<SafetensorsFile> result(new SafetensorsFile());
  result->path_ = path;
  result->fd_ = fd;  // closed by the destructor
  result->mtime_ = st.st_mtim;
  result->mapping_size_ = static_cast<size_t>(st.st_size);
  if (result->mapping_size_ < 8) {
    return Status::InvalidArgument(file + ": file is " + std::to_string(st.st_size) +
                                   " bytes, shorter than the 8-byte header length");
  }
  // Private and writable (copy-on-write): an accidental in-place op can never crash or touch the file.
  void* mapping = mmap(nullptr, result->mapping_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) return Status::Internal(file + ": mmap failed: " + std::strerror(errno));
  result->mapping_ = mapping;
  // Start reading the file into the page cache in the background (a cold start from disk), without
  // waiting for it: the mapping's pages are then mapped in on first use, nothing before.
  ::madvise(mapping, result->mapping_size_, MADV_WILLNEED);
  NIELS_RETURN_IF_ERROR(result->ParseHeader());
  return std::shared_ptr<const SafetensorsFile>(std::move(result));
}

Status SafetensorsFile::ParseHeader() {
  const std::string file = path_.string();
  const auto* bytes = static_cast<const unsigned char*>(mapping_);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  if (header_length > mapping_size_ - 8) {
    return Status::InvalidArgument(file + ": header length " + std::to_string(header_length) +
                                   " is longer than the file (" + std::to_string(mapping_size_ - 8) +
                                   " bytes after the length field)");
  }
  data_start_ = 8 + header_length;
  const uint64_t data_size = mapping_size_ - data_start_;
  common::JsonParseFailure failure = common::JsonParseFailure::kNone;
  StatusOr<Json> parsed = common::ParseJsonBounded(
      std::string_view(reinterpret_cast<const char*>(bytes) + 8, header_length), file + ": header", &failure);
  if (failure == common::JsonParseFailure::kSyntax) return Status::InvalidArgument(file + ": header is not valid JSON");
  if (!parsed.ok()) return parsed.status();
  const Json& header = *parsed;
  if (!header.is_object()) return Status::InvalidArgument(file + ": header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensorInfo info;
    NIELS_RETURN_IF_ERROR(ParseEntry(file, name, entry, &info));
    if (info.end > data_size) {
      return Status::InvalidArgument(file + ": tensor " + name + ": data_offsets [" +
                                     std::to_string(info.begin) + ", " + std::to_string(info.end) +
                                     "] point past the end of the data (" + std::to_string(data_size) +
                                     " bytes)");
    }
    tensors_.push_back(std::move(info));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const auto& prev = tensors_[i - 1];
    const auto& cur = tensors_[i];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (prev.end > cur.begin && prev.begin != prev.end && cur.begin != cur.end) {
      return Status::InvalidArgument(file + ": tensors " + prev.name + " and " + cur.name +
                                     " have overlapping data_offsets");
    }
  }
  // Names are distinct (keys of one JSON object); the views point into tensors_, fixed from here on.
  by_name_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
  return Status::Ok();
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const std::byte* SafetensorsFile::Data(const SafetensorsTensorInfo& info) const {
  return static_cast<const std::byte*>(mapping_) + data_start_ + info.begin;
}

Status WriteSafetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsEntry& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t nbytes = numel * static_cast<uint64_t>(SafetensorsDtypeSize(t.dtype));
    header[t.name] = {{"dtype", std::string(SafetensorsDtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  return WriteFileAtomically(path, [&](std::ostream& out) {
    std::array<char, 8> length{};
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    out.write(length.data(), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (sizes[i] > 0) out.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
    }
  });
}

}  // namespace niels::daemon::formats
