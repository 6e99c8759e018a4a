#include "daemon/loaders/model_loader.h"

#include <system_error>

#include "daemon/loaders/niels_dir.h"

namespace niels::daemon::loaders {

using common::Status;
using common::StatusOr;

StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& path, std::shared_ptr<kernels::WorkerPool> pool,
                                           const LoadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    return Status::NotFound(path.string() + ": not a model directory (expected config.json, "
                            "model.safetensors, tokenizer.model)");
  }
  return LoadNielsDir(path, std::move(pool), options);
}

}  // namespace niels::daemon::loaders
