// Fuzz target: niels-quantize's input side and quantizer (tools/quantize): GgufTensorSource::Open
// on a GGUF file, then Quantize() into a temp directory.
//
// Input: the bytes of a GGUF file (put in a memfd, opened through /proc/self/fd as a real file
// would be). The file type is chosen by the input's size modulo 4, the threads (1 or 2) by its
// size modulo 8 div 4 (so a mutation that adds bytes also changes them).
// Invariants: a source that opens has a supported architecture and only f32/f16/bf16 tensors; a
// Quantize() that fails leaves no file at the output path and nothing else in the directory; one
// that succeeds leaves exactly the output, which nielsd's GGUF reader opens, with the source's
// tensors (names, dims, order) of the types the result reports, general.file_type and
// general.quantization_version set, and every source key kept (bar split.*) in order.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/formats/gguf_file.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/quantize/gguf_tensor_source.h"
#include "tools/quantize/quantizer.h"

namespace formats = niels::daemon::formats;
namespace q = niels::tools::quantize;

namespace {

struct MemFile {
  MemFile(const void* bytes, size_t size) {
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

// One output directory per process (on /dev/shm when there is one), removed at exit.
struct OutputDir {
  OutputDir() {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/niels_fuzz_quantize_XXXXXX";
    FUZZ_CHECK(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~OutputDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

size_t Entries(const std::filesystem::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static OutputDir dir;  // removed when the process exits
  MemFile file(data, size);
  auto source = q::GgufTensorSource::Open(file.path);
  if (!source.ok()) return 0;
  const q::ModelDesc& model = (*source)->model();
  FUZZ_CHECK(model.architecture == "llama" || model.architecture == "qwen2" || model.architecture == "qwen3");
  for (const q::SourceTensor& t : (*source)->tensors()) {
    FUZZ_CHECK(t.type == formats::GgmlType::kF32 || t.type == formats::GgmlType::kF16 ||
               t.type == formats::GgmlType::kBF16);
  }
  const std::filesystem::path out = dir.path / "out.gguf";
  std::error_code ec;
  std::filesystem::remove(out, ec);
  q::QuantizeOptions options;
  constexpr q::FileType kTypes[] = {q::FileType::kQ8_0, q::FileType::kQ4_0, q::FileType::kQ4_K_M,
                                    q::FileType::kQ5_K_M};
  options.type = kTypes[size % 4];
  options.threads = 1 + static_cast<int>(size % 8 / 4);
  options.slab_elements = 512;
  auto result = q::Quantize(**source, out, options);
  if (!result.ok()) {
    FUZZ_CHECK(Entries(dir.path) == 0);
    return 0;
  }
  FUZZ_CHECK(Entries(dir.path) == 1);
  auto written = formats::GgufFile::Open(out);
  FUZZ_CHECK(written.ok());
  const auto& tensors = (*source)->tensors();
  FUZZ_CHECK((*written)->tensors().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const formats::GgufTensorInfo& t = (*written)->tensors()[i];
    FUZZ_CHECK(t.name == tensors[i].name);
    FUZZ_CHECK(std::vector<int64_t>(t.dims, t.dims + t.n_dims) == tensors[i].dims);
    FUZZ_CHECK(t.type == result->types[i]);
  }
  FUZZ_CHECK(*(*written)->GetUint("general.file_type") == q::LlamaFileType(options.type));
  FUZZ_CHECK(*(*written)->GetUint("general.quantization_version") == q::kQuantizationVersion);
  size_t k = 0;
  for (const q::MetadataEntry& entry : (*source)->metadata()) {
    while (k < (*written)->metadata().size() && (*written)->metadata()[k].key != entry.key) ++k;
    FUZZ_CHECK(k < (*written)->metadata().size());
  }
  return 0;
}
