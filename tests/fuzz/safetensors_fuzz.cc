// Fuzz target: the safetensors header and tensor table (daemon/formats/safetensors.h), and the
// weights check on top of it (daemon/model/weights.h, LoadWeights).
//
// Input: the bytes of a model.safetensors file. It is put in a memfd and opened through
// /proc/self/fd, so Open() maps it exactly as it maps a real file.
// Invariants: an accepted file's tensors lie inside the data section, do not overlap, and have
// byte ranges equal to shape x dtype size; every float tensor can be read whole (ASan checks the
// reads stay inside the mapping); LoadWeights against a tiny config (as stored, and converted to
// f16) either fails with a message or returns tensors of exactly the config's shapes, in one dtype.
#include <sys/mman.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "daemon/formats/safetensors.h"
#include "daemon/loaders/niels_dir.h"
#include "daemon/model/weights.h"
#include "tests/fuzz/fuzz_util.h"

namespace model = niels::daemon::model;
namespace formats = niels::daemon::formats;
namespace loaders = niels::daemon::loaders;

namespace {

// The config the seeds' valid file was written for (tests/fuzz/make_seeds.py): V 8, T 8, C 8,
// L 1, H 2, d_ff 8.
model::ModelConfig SeedConfig() {
  model::ModelConfig c;
  c.vocab_size = 8;
  c.context = 8;
  c.width = 8;
  c.layers = 1;
  c.heads = 2;
  c.d_ff = 8;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  FUZZ_CHECK(fd >= 0);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = write(fd, data + written, size - written);
    FUZZ_CHECK(n > 0);
    written += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  auto file = formats::SafetensorsFile::Open(path);
  if (file.ok()) {
    const formats::SafetensorsTensorInfo* previous = nullptr;
    for (const formats::SafetensorsTensorInfo& info : (*file)->tensors()) {
      FUZZ_CHECK(info.begin <= info.end && info.end <= (*file)->mapping_size());
      int64_t elements = 1;
      for (int64_t dim : info.shape) {
        FUZZ_CHECK(dim >= 0);
        elements *= dim;
      }
      FUZZ_CHECK(static_cast<uint64_t>(elements * formats::SafetensorsDtypeSize(info.dtype)) ==
                 info.end - info.begin);
      if (previous != nullptr && previous->begin != previous->end && info.begin != info.end) {
        FUZZ_CHECK(previous->end <= info.begin);
      }
      if (info.begin != info.end) previous = &info;
      if (info.dtype == formats::SafetensorsDtype::kF32 || info.dtype == formats::SafetensorsDtype::kF16 ||
          info.dtype == formats::SafetensorsDtype::kBF16) {
        const niels::daemon::kernels::Dtype dtype =
            info.dtype == formats::SafetensorsDtype::kF32   ? niels::daemon::kernels::Dtype::kF32
            : info.dtype == formats::SafetensorsDtype::kF16 ? niels::daemon::kernels::Dtype::kF16
                                                          : niels::daemon::kernels::Dtype::kBF16;
        std::vector<unsigned char> aligned(info.end - info.begin);  // Data() may sit at any offset
        for (size_t i = 0; i < aligned.size(); ++i) aligned[i] = static_cast<unsigned char>((*file)->Data(info)[i]);
        volatile double sum = 0.0;  // reads every element
        for (int64_t i = 0; i < elements; ++i) sum = sum + niels::daemon::kernels::ElementToFloat(aligned.data(), dtype, i);
        (void)sum;
      }
    }
  } else {
    FUZZ_CHECK(!file.status().message().empty());
  }

  const model::ModelConfig config = SeedConfig();
  for (std::optional<niels::daemon::kernels::Dtype> dtype :
       {std::optional<niels::daemon::kernels::Dtype>(), std::optional(niels::daemon::kernels::Dtype::kF16)}) {
    auto weights = loaders::LoadNielsWeights(path, config, dtype);
    if (weights.ok()) {
      FUZZ_CHECK(weights->tok_emb.shape == std::vector<int64_t>({config.vocab_size, config.width}));
      FUZZ_CHECK(static_cast<int64_t>(weights->blocks.size()) == config.layers);
      FUZZ_CHECK(weights->blocks[0].wqkv.shape == std::vector<int64_t>({3 * config.width, config.width}));
      FUZZ_CHECK(weights->blocks[0].wqkv.dtype == weights->dtype());
      FUZZ_CHECK(weights->final_norm.shape == std::vector<int64_t>({config.width}));
      FUZZ_CHECK(weights->final_norm.dtype == niels::daemon::kernels::Dtype::kF32);
      FUZZ_CHECK(!dtype || weights->dtype() == *dtype);
      volatile float sum = 0.0f;  // reads every element of a matrix, wherever it lives
      for (float v : weights->blocks[0].w_down.ToFloats()) sum = sum + v;
      (void)sum;
    } else {
      FUZZ_CHECK(!weights.status().message().empty());
    }
  }
  close(fd);
  return 0;
}
