#include "tools/quantize/quantizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "daemon/formats/gguf_writer.h"
#include "daemon/kernels/worker_pool.h"
#include "tools/quantize/output_file.h"
#include "tools/quantize/tensor_encoder.h"

namespace niels::tools::quantize {

using common::Status;
using common::StatusOr;
using formats::GgmlType;
using formats::GgufWriteValue;

namespace {

constexpr std::string_view kFileTypeKey = "general.file_type";
constexpr std::string_view kQuantizationVersionKey = "general.quantization_version";

// The source's metadata with the two keys a quantized file states (replaced where they are, else
// appended in llama.cpp's order).
Status AddMetadata(const TensorSource& source, FileType type, formats::GgufWriter* writer) {
  const GgufWriteValue file_type = GgufWriteValue::U32(LlamaFileType(type));
  const GgufWriteValue version = GgufWriteValue::U32(kQuantizationVersion);
  bool have_file_type = false, have_version = false;
  for (const MetadataEntry& entry : source.metadata()) {
    if (entry.key == kFileTypeKey) {
      have_file_type = true;
      NIELS_RETURN_IF_ERROR(writer->AddMetadata(entry.key, file_type));
    } else if (entry.key == kQuantizationVersionKey) {
      have_version = true;
      NIELS_RETURN_IF_ERROR(writer->AddMetadata(entry.key, version));
    } else {
      NIELS_RETURN_IF_ERROR(writer->AddMetadata(entry.key, entry.value));
    }
  }
  if (!have_version) NIELS_RETURN_IF_ERROR(writer->AddMetadata(kQuantizationVersionKey, version));
  if (!have_file_type) NIELS_RETURN_IF_ERROR(writer->AddMetadata(kFileTypeKey, file_type));
  return Status::Ok();
}

// Streams tensors to the output one slab at a time; the slab buffers are reused across tensors.
class TensorWriter {
 public:
  TensorWriter(const TensorSource& source, const QuantizeOptions& options, OutputFile* out)
      : source_(source), pool_(options.threads), out_(out),
        slab_(std::max<int64_t>(1, options.slab_elements / 256) * 256) {}

  // Writes tensor `index` as `target` at the output's end; fills the report's sizes.
  Status Write(size_t index, GgmlType target, TensorReport* report);

 private:
  // Elements [first, first + n) of the tensor, checked and encoded into encoded_ by the pool.
  Status EncodeSlab(size_t index, GgmlType target, int64_t first, int64_t n);
  // The same elements copied as stored (target == the source's type), checked.
  Status CopySlab(size_t index, int64_t first, int64_t n);
  // The part of slab elements [e0, e0 + count) (offsets within the slab) that one thread encodes.
  Status EncodePart(size_t index, GgmlType target, int64_t first, int64_t e0, int64_t count);
  Status ValueError(size_t index, GgmlType target, int64_t element, float value) const;

  const TensorSource& source_;
  daemon::kernels::WorkerPool pool_;
  OutputFile* out_;
  const int64_t slab_;  // elements per slab, a multiple of 256 (so of every block size)
  std::vector<float> values_;
  std::vector<unsigned char> encoded_;
};

Status TensorWriter::Write(size_t index, GgmlType target, TensorReport* report) {
  const SourceTensor& t = source_.tensors()[index];
  const uint64_t start = out_->size();
  for (int64_t first = 0; first < t.elements; first += slab_) {
    const int64_t n = std::min(slab_, t.elements - first);  // whole blocks: rows are whole blocks
    if (target == t.type) {
      NIELS_RETURN_IF_ERROR(CopySlab(index, first, n));
    } else {
      NIELS_RETURN_IF_ERROR(EncodeSlab(index, target, first, n));
    }
  }
  report->bytes_in = static_cast<uint64_t>(t.elements * formats::GgmlTypeInfo(t.type).type_size);
  report->bytes_out = out_->size() - start;
  return Status::Ok();
}

Status TensorWriter::ValueError(size_t index, GgmlType target, int64_t element, float value) const {
  const SourceTensor& t = source_.tensors()[index];
  const std::string where = fmt::format("tensor \"{}\": the value {} at row {}, column {}", t.name, value,
                                        element / t.row_length(), element % t.row_length());
  if (!std::isfinite(value)) return Status::InvalidArgument(where + " is not finite");
  return Status::InvalidArgument(fmt::format("{} is too large to quantize to {} (more than {:g} in magnitude)", where,
                                             formats::GgmlTypeName(target), kMaxQuantizedMagnitude));
}

Status TensorWriter::CopySlab(size_t index, int64_t first, int64_t n) {
  const SourceTensor& t = source_.tensors()[index];
  values_.resize(static_cast<size_t>(n));
  NIELS_RETURN_IF_ERROR(source_.ReadElements(index, first, n, values_.data()));
  if (std::optional<int64_t> bad = FirstUnencodableValue(t.type, values_.data(), n)) {
    return ValueError(index, t.type, first + *bad, values_[*bad]);
  }
  const int64_t bytes = n * formats::GgmlTypeInfo(t.type).type_size;
  encoded_.resize(static_cast<size_t>(bytes));
  NIELS_RETURN_IF_ERROR(source_.ReadRawElements(index, first, n, encoded_.data()));
  return out_->Append(encoded_.data(), static_cast<uint64_t>(bytes));
}

Status TensorWriter::EncodePart(size_t index, GgmlType target, int64_t first, int64_t e0, int64_t count) {
  if (count == 0) return Status::Ok();
  const formats::GgmlTypeTraits& traits = formats::GgmlTypeInfo(target);
  float* values = values_.data() + e0;
  NIELS_RETURN_IF_ERROR(source_.ReadElements(index, first + e0, count, values));
  if (std::optional<int64_t> bad = FirstUnencodableValue(target, values, count)) {
    return ValueError(index, target, first + e0 + *bad, values[*bad]);
  }
  unsigned char* encoded = encoded_.data() + e0 / traits.block_size * traits.type_size;
  EncodeValues(target, values, count, encoded);
  if (std::optional<int64_t> bad = FirstInvalidBlock(target, encoded, count / traits.block_size)) {
    const SourceTensor& t = source_.tensors()[index];
    const int64_t element = first + e0 + *bad * traits.block_size;
    return Status::InvalidArgument(fmt::format(
        "tensor \"{}\": the {} block at row {}, columns {} to {} overflows f16 (its values are too large for "
        "{}; llama.cpp refuses such blocks too)",
        t.name, traits.name, element / t.row_length(), element % t.row_length(),
        element % t.row_length() + traits.block_size - 1, traits.name));
  }
  return Status::Ok();
}

Status TensorWriter::EncodeSlab(size_t index, GgmlType target, int64_t first, int64_t n) {
  const formats::GgmlTypeTraits& traits = formats::GgmlTypeInfo(target);
  const int64_t blocks = n / traits.block_size;
  values_.resize(static_cast<size_t>(n));
  encoded_.resize(static_cast<size_t>(blocks * traits.type_size));
  std::vector<Status> results(static_cast<size_t>(pool_.threads()));
  pool_.Run([&](int part, int parts) {
    const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
    results[static_cast<size_t>(part)] =
        EncodePart(index, target, first, b0 * traits.block_size, (b1 - b0) * traits.block_size);
  });
  for (const Status& s : results) NIELS_RETURN_IF_ERROR(s);  // the first failing part, in order
  return out_->Append(encoded_.data(), encoded_.size());
}

}  // namespace

StatusOr<QuantizeResult> Quantize(const TensorSource& source, const std::filesystem::path& out,
                                  const QuantizeOptions& options) {
  if (options.threads < 1 || options.threads > 1024) {
    return Status::InvalidArgument(fmt::format("threads = {} (1 to 1024 allowed)", options.threads));
  }
  const std::vector<SourceTensor>& tensors = source.tensors();
  StatusOr<std::vector<GgmlType>> types = PlanTensorTypes(options.type, source.model(), tensors);
  if (!types.ok()) return Status::InvalidArgument(source.Describe() + ": " + types.status().message());
  formats::GgufWriter writer;
  NIELS_RETURN_IF_ERROR(AddMetadata(source, options.type, &writer));
  for (size_t i = 0; i < tensors.size(); ++i) {
    NIELS_RETURN_IF_ERROR(writer.AddTensor(tensors[i].name, (*types)[i], tensors[i].dims, nullptr));
  }
  std::vector<uint64_t> offsets;
  const std::string header = writer.HeaderBytes(&offsets);

  StatusOr<std::unique_ptr<OutputFile>> file = OutputFile::Create(out);
  if (!file.ok()) return file.status();
  OutputFile& output = **file;
  NIELS_RETURN_IF_ERROR(output.Append(header.data(), header.size()));
  QuantizeResult result;
  result.types = *types;
  TensorWriter tensor_writer(source, options, &output);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t at = header.size() + offsets[i];
    if (output.size() > at) return Status::Internal(fmt::format("tensor \"{}\": written past its offset", tensors[i].name));
    NIELS_RETURN_IF_ERROR(output.AppendZeros(at - output.size()));
    TensorReport report{i, tensors.size(), tensors[i].name, tensors[i].type, (*types)[i], tensors[i].elements};
    NIELS_RETURN_IF_ERROR(tensor_writer.Write(i, (*types)[i], &report));
    result.bytes_in += report.bytes_in;
    result.bytes_out += report.bytes_out;
    if (options.on_tensor) options.on_tensor(report);
  }
  NIELS_RETURN_IF_ERROR(output.Commit());
  result.file_size = output.size();
  return result;
}

}  // namespace niels::tools::quantize
