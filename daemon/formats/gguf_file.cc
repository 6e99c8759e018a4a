#include "daemon/formats/gguf_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "daemon/formats/gguf_encoding.h"

namespace niels::daemon::formats {

using common::Status;
using common::StatusOr;
using gguf_internal::FixedSize;
using gguf_internal::Load;

namespace {

constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, tensor count, kv count

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  static constexpr std::string_view kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                                "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                                "UINT64", "INT64",   "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::vector<int64_t> GgufTensorInfo::Shape() const {
  std::vector<int64_t> shape;
  for (int i = n_dims - 1; i >= 0; --i) shape.push_back(dims[i]);
  return shape;
}

// ------------------------------------------------------------------------------------------------
// Parser: walks the header once, front to back, checking every read against the file's size.

class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* file) : f_(file), file_(file->path_.string()) {}

  Status Run();

 private:
  Status Error(uint64_t at, const std::string& what) const {
    return Status::InvalidArgument(fmt::format("{}: {} (at byte {})", file_, what, at));
  }
  uint64_t Remaining() const { return f_->size_ - pos_; }
  Status Need(uint64_t n, std::string_view what) const {
    if (n > Remaining()) {
      return Error(pos_, fmt::format("{} needs {} bytes but the file ends {} bytes later", what, n, Remaining()));
    }
    return Status::Ok();
  }
  template <typename T>
  Status Read(T* out, std::string_view what) {
    NIELS_RETURN_IF_ERROR(Need(sizeof(T), what));
    *out = Load<T>(f_->mapping_ + pos_);
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status ReadString(std::string_view* out, uint64_t max_length, std::string_view what);
  Status ReadHeader(uint64_t* tensor_count, uint64_t* kv_count);
  Status ReadKeyValue();
  Status ReadValue(uint32_t type, int depth, const std::string& where, GgufValue* value);
  Status ReadArrayBody(const std::string& where, int depth, GgufValue* value);
  Status ReadTensorInfo();
  Status ReadAlignment();
  Status CheckTensorData();

  GgufFile* f_;
  std::string file_;
  uint64_t pos_ = 0;
};

Status GgufFile::Parser::ReadString(std::string_view* out, uint64_t max_length, std::string_view what) {
  const uint64_t at = pos_;
  uint64_t length = 0;
  NIELS_RETURN_IF_ERROR(Read(&length, what));
  if (length > max_length)
    return Error(at, fmt::format("{} is {} bytes long, more than {}", what, length, max_length));
  if (length > Remaining()) {
    return Error(at,
                 fmt::format("{} is {} bytes long but the file ends {} bytes later", what, length, Remaining()));
  }
  *out = std::string_view(reinterpret_cast<const char*>(f_->mapping_ + pos_), length);
  pos_ += length;
  return Status::Ok();
}

Status GgufFile::Parser::ReadHeader(uint64_t* tensor_count, uint64_t* kv_count) {
  if (f_->size_ < kHeaderBytes) {
    return Error(
        0, fmt::format("the file is {} bytes, shorter than a GGUF header ({} bytes)", f_->size_, kHeaderBytes));
  }
  if (std::memcmp(f_->mapping_, "GGUF", 4) != 0) return Error(0, "not a GGUF file (the magic is not \"GGUF\")");
  pos_ = 4;
  NIELS_RETURN_IF_ERROR(Read(&f_->version_, "the version"));
  if (f_->version_ == 0x03000000 || f_->version_ == 0x02000000) {
    return Error(4, "a big-endian GGUF file; only little-endian files are supported");
  }
  if (f_->version_ != 2 && f_->version_ != 3) {
    return Error(4, fmt::format("GGUF version {} is not supported (versions 2 and 3 are)", f_->version_));
  }
  NIELS_RETURN_IF_ERROR(Read(tensor_count, "the tensor count"));
  NIELS_RETURN_IF_ERROR(Read(kv_count, "the key/value count"));
  // Every key/value takes at least 13 bytes (length, type, a one-byte value), every tensor info
  // at least 32 (name length, n_dims, one dim, type, offset).
  if (*kv_count > kGgufMaxKeyValues || *kv_count > Remaining() / 13) {
    return Error(16, fmt::format("the file declares {} key/values; at most {} fit in its {} bytes (limit {})",
                                 *kv_count, Remaining() / 13, f_->size_, kGgufMaxKeyValues));
  }
  if (*tensor_count > kGgufMaxTensors || *tensor_count > Remaining() / 32) {
    return Error(8, fmt::format("the file declares {} tensors; at most {} fit in its {} bytes (limit {})",
                                *tensor_count, Remaining() / 32, f_->size_, kGgufMaxTensors));
  }
  return Status::Ok();
}

Status GgufFile::Parser::ReadArrayBody(const std::string& where, int depth, GgufValue* value) {
  const uint64_t at = pos_;
  uint32_t element_type = 0;
  NIELS_RETURN_IF_ERROR(Read(&element_type, where + ": the array's element type"));
  const int element_size = FixedSize(element_type);
  if (element_size < 0) return Error(at, fmt::format("{}: unknown array element type {}", where, element_type));
  if (element_type == static_cast<uint32_t>(GgufValueType::kArray) && depth + 1 >= kGgufMaxArrayDepth) {
    return Error(at, fmt::format("{}: arrays nested deeper than {} levels", where, kGgufMaxArrayDepth));
  }
  uint64_t count = 0;
  NIELS_RETURN_IF_ERROR(Read(&count, where + ": the array's length"));
  value->element_type = static_cast<GgufValueType>(element_type);
  value->count = count;
  value->data = f_->mapping_ + pos_;
  // Each element takes at least one byte (fixed types), 8 (a string's length) or 12 (an array's
  // type and count), so a count beyond Remaining() / that is a lie; checked before any walking.
  const uint64_t min_element = element_size > 0 ? static_cast<uint64_t>(element_size)
                               : element_type == static_cast<uint32_t>(GgufValueType::kString) ? 8
                                                                                               : 12;
  if (count > Remaining() / min_element) {
    return Error(
        at, fmt::format("{}: an array of {} {} elements needs at least {} bytes but the file ends {} bytes later",
                        where, count, GgufValueTypeName(value->element_type),
                        count > std::numeric_limits<uint64_t>::max() / min_element
                            ? std::string("2^64")
                            : std::to_string(count * min_element),
                        Remaining()));
  }
  if (element_size > 0) {
    if (element_type == static_cast<uint32_t>(GgufValueType::kBool)) {
      for (uint64_t i = 0; i < count; ++i) {
        const auto b = static_cast<uint8_t>(f_->mapping_[pos_ + i]);
        if (b > 1) return Error(pos_ + i, fmt::format("{}: element {} is a BOOL of value {}", where, i, b));
      }
    }
    pos_ += count * static_cast<uint64_t>(element_size);
    return Status::Ok();
  }
  for (uint64_t i = 0; i < count; ++i) {
    // Strings (a tokenizer's 151,936 tokens and 151,387 merges) are skipped without naming each
    // element; an element that does not fit is read again below, for the error that names it.
    if (element_type == static_cast<uint32_t>(GgufValueType::kString) && Remaining() >= sizeof(uint64_t)) {
      uint64_t length = 0;
      std::memcpy(&length, f_->mapping_ + pos_, sizeof length);
      if (length <= Remaining() - sizeof length) {
        pos_ += sizeof length + length;
        continue;
      }
    }
    GgufValue element;
    NIELS_RETURN_IF_ERROR(ReadValue(element_type, depth + 1, fmt::format("{}[{}]", where, i), &element));
  }
  return Status::Ok();
}

Status GgufFile::Parser::ReadValue(uint32_t type, int depth, const std::string& where, GgufValue* value) {
  const uint64_t at = pos_;
  const int size = FixedSize(type);
  if (size < 0) return Error(at, fmt::format("{}: unknown value type {}", where, type));
  value->type = static_cast<GgufValueType>(type);
  value->offset = at;
  if (size > 0) {
    NIELS_RETURN_IF_ERROR(Need(static_cast<uint64_t>(size), where));
    value->data = f_->mapping_ + pos_;
    if (value->type == GgufValueType::kBool && static_cast<uint8_t>(*value->data) > 1) {
      return Error(at, fmt::format("{}: a BOOL of value {}", where, static_cast<uint8_t>(*value->data)));
    }
    pos_ += static_cast<uint64_t>(size);
  } else if (value->type == GgufValueType::kString) {
    std::string_view text;
    NIELS_RETURN_IF_ERROR(ReadString(&text, std::numeric_limits<uint64_t>::max(), where));
    value->data = reinterpret_cast<const std::byte*>(text.data());
    value->count = text.size();
  } else {
    NIELS_RETURN_IF_ERROR(ReadArrayBody(where, depth, value));
  }
  value->size = pos_ - at;
  return Status::Ok();
}

Status GgufFile::Parser::ReadKeyValue() {
  GgufKeyValue kv;
  kv.offset = pos_;
  NIELS_RETURN_IF_ERROR(ReadString(&kv.key, kGgufMaxKeyLength, "a metadata key"));
  if (kv.key.empty()) return Error(kv.offset, "an empty metadata key");
  const std::string where = fmt::format("key \"{}\"", kv.key);
  if (f_->key_index_.count(kv.key) != 0) return Error(kv.offset, where + " appears twice");
  uint32_t type = 0;
  NIELS_RETURN_IF_ERROR(Read(&type, where + ": the value type"));
  NIELS_RETURN_IF_ERROR(ReadValue(type, 0, where, &kv.value));
  f_->key_index_.emplace(kv.key, f_->metadata_.size());
  f_->metadata_.push_back(kv);
  return Status::Ok();
}

Status GgufFile::Parser::ReadTensorInfo() {
  GgufTensorInfo t;
  t.info_offset = pos_;
  NIELS_RETURN_IF_ERROR(ReadString(&t.name, kGgufMaxTensorNameLength, "a tensor name"));
  if (t.name.empty()) return Error(t.info_offset, "an empty tensor name");
  const std::string where = fmt::format("tensor \"{}\"", t.name);
  if (f_->tensor_index_.count(t.name) != 0) return Error(t.info_offset, where + " appears twice");
  uint32_t n_dims = 0;
  NIELS_RETURN_IF_ERROR(Read(&n_dims, where + ": n_dims"));
  if (n_dims < 1 || n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
    return Error(pos_ - 4, fmt::format("{}: {} dims (1 to {} are allowed)", where, n_dims, kGgufMaxDims));
  }
  t.n_dims = static_cast<int>(n_dims);
  t.elements = 1;
  for (int i = 0; i < t.n_dims; ++i) {
    uint64_t dim = 0;
    NIELS_RETURN_IF_ERROR(Read(&dim, where + ": a dim"));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(t.elements, static_cast<int64_t>(dim), &t.elements)) {
      return Error(pos_ - 8, fmt::format("{}: dim {} = {} makes the element count overflow int64", where, i, dim));
    }
    t.dims[i] = static_cast<int64_t>(dim);
  }
  uint32_t type = 0;
  NIELS_RETURN_IF_ERROR(Read(&type, where + ": the ggml type"));
  const std::optional<GgmlTypeTraits> traits = FindGgmlType(type);
  if (!traits) return Error(pos_ - 4, fmt::format("{}: unknown ggml type {}", where, type));
  t.type = traits->type;
  const std::optional<int64_t> bytes = GgmlTensorBytes(t.type, t.dims[0], t.elements);
  if (!bytes) {
    return Error(pos_ - 4, fmt::format("{}: rows of {} elements are not a whole number of {}'s {}-element blocks",
                                       where, t.dims[0], traits->name, traits->block_size));
  }
  t.size_bytes = static_cast<uint64_t>(*bytes);
  NIELS_RETURN_IF_ERROR(Read(&t.offset, where + ": the data offset"));
  f_->tensor_index_.emplace(t.name, f_->tensors_.size());
  f_->tensors_.push_back(t);
  return Status::Ok();
}

Status GgufFile::Parser::ReadAlignment() {
  const GgufKeyValue* kv = f_->FindKey("general.alignment");
  if (kv == nullptr) return Status::Ok();
  if (kv->value.type != GgufValueType::kUint32) {
    return Error(kv->offset, fmt::format("key \"general.alignment\" is a {}, not a UINT32",
                                         GgufValueTypeName(kv->value.type)));
  }
  const uint32_t alignment = Load<uint32_t>(kv->value.data);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kGgufMaxAlignment) {
    return Error(kv->value.offset, fmt::format("key \"general.alignment\" is {}, not a power of two of at most {}",
                                               alignment, kGgufMaxAlignment));
  }
  f_->alignment_ = alignment;
  return Status::Ok();
}

Status GgufFile::Parser::CheckTensorData() {
  if (!f_->tensors_.empty() && f_->data_offset_ > f_->size_) {
    return Error(pos_, fmt::format("the data section would start at byte {}, past the end of the file ({} bytes)",
                                   f_->data_offset_, f_->size_));
  }
  const uint64_t data_size = f_->data_offset_ <= f_->size_ ? f_->size_ - f_->data_offset_ : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f_->tensors_.size());
  for (const GgufTensorInfo& t : f_->tensors_) {
    const std::string where = fmt::format("tensor \"{}\"", t.name);
    if (t.offset % f_->alignment_ != 0) {
      return Error(t.info_offset, fmt::format("{}: data offset {} is not a multiple of the alignment {}", where,
                                              t.offset, f_->alignment_));
    }
    if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
      return Error(t.info_offset,
                   fmt::format("{}: its {} bytes at data offset {} (file offset {}) run past the end "
                               "of the file ({} bytes)",
                               where, t.size_bytes, t.offset, f_->data_offset_ + t.offset, f_->size_));
    }
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.size_bytes > b.offset) {
      return Error(b.info_offset,
                   fmt::format("tensor \"{}\" (data offset {}) overlaps tensor \"{}\" (data offsets {} "
                               "to {})",
                               b.name, b.offset, a.name, a.offset, a.offset + a.size_bytes));
    }
  }
  return Status::Ok();
}

Status GgufFile::Parser::Run() {
  uint64_t tensor_count = 0, kv_count = 0;
  NIELS_RETURN_IF_ERROR(ReadHeader(&tensor_count, &kv_count));
  f_->metadata_.reserve(kv_count);  // bounded by the file's size above
  for (uint64_t i = 0; i < kv_count; ++i) NIELS_RETURN_IF_ERROR(ReadKeyValue());
  NIELS_RETURN_IF_ERROR(ReadAlignment());
  if (tensor_count > Remaining() / 32) {
    return Error(pos_, fmt::format("the file declares {} tensors; the {} bytes after the metadata hold at most {}",
                                   tensor_count, Remaining(), Remaining() / 32));
  }
  f_->tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) NIELS_RETURN_IF_ERROR(ReadTensorInfo());
  f_->data_offset_ = pos_ + (f_->alignment_ - pos_ % f_->alignment_) % f_->alignment_;
  return CheckTensorData();
}

// ------------------------------------------------------------------------------------------------

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(const_cast<std::byte*>(mapping_), size_);
  if (fd_ >= 0) ::close(fd_);
}

Status GgufFile::CheckUnchanged() const { return CheckFileUnchanged(fd_, mtime_, size_, path_); }

StatusOr<std::shared_ptr<const GgufFile>> GgufFile::Open(const std::filesystem::path& path) {
  const std::string file = path.string();
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound(file + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(file + ": not a regular file");
  }
  std::shared_ptr<GgufFile> result(new GgufFile());
  result->path_ = path;
  result->fd_ = fd;  // closed by the destructor
  result->mtime_ = st.st_mtim;
  result->size_ = static_cast<uint64_t>(st.st_size);
  if (result->size_ > 0) {
    void* mapping = ::mmap(nullptr, result->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) return Status::Internal(file + ": mmap failed: " + std::strerror(errno));
    result->mapping_ = static_cast<const std::byte*>(mapping);
  }
  NIELS_RETURN_IF_ERROR(Parser(result.get()).Run());
  return std::shared_ptr<const GgufFile>(std::move(result));
}

const GgufKeyValue* GgufFile::FindKey(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second];
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const std::byte* GgufFile::TensorData(const GgufTensorInfo& info) const {
  return mapping_ + data_offset_ + info.offset;
}

}  // namespace niels::daemon::formats
