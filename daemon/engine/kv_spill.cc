#include "daemon/engine/kv_spill.h"

#include <cstring>

namespace niels::daemon::engine {

state::KvSpillHeader SpillHeader(const model::ModelConfig& config, const std::string& model_fingerprint,
                                 std::span<const int32_t> tokens, int64_t positions) {
  state::KvSpillHeader header;
  header.model_fingerprint = model_fingerprint;
  header.layers = static_cast<uint32_t>(config.layers);
  header.heads = static_cast<uint32_t>(config.heads);
  header.head_dim = static_cast<uint32_t>(config.head_dim());
  header.positions = positions;
  header.tokens_hash = state::HashTokens(tokens.first(static_cast<size_t>(positions)));
  return header;
}

common::StatusOr<uint64_t> WriteKvSpill(model::KvCache& cache, std::span<const int32_t> tokens,
                                        const model::ModelConfig& config, const std::string& model_fingerprint,
                                        const std::filesystem::path& path) {
  const int64_t positions = cache.length();
  auto writer = state::KvSpillWriter::Create(path, SpillHeader(config, model_fingerprint, tokens, positions));
  if (!writer.ok()) return writer.status();
  const int64_t head_stride = cache.capacity() * config.head_dim();
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    const auto l = static_cast<uint32_t>(layer);
    NIELS_RETURN_IF_ERROR((*writer)->AddRange(l, state::KvKind::kKeys, 0, positions, cache.KeyStorage(layer), head_stride));
    NIELS_RETURN_IF_ERROR(
        (*writer)->AddRange(l, state::KvKind::kValues, 0, positions, cache.ValueStorage(layer), head_stride));
  }
  return (*writer)->Finish();
}

common::Status ReadKvSpillInto(model::KvCache& cache, std::span<const int32_t> tokens, int64_t positions,
                               const model::ModelConfig& config, const std::string& model_fingerprint,
                               const std::filesystem::path& path) {
  const state::KvSpillHeader header = SpillHeader(config, model_fingerprint, tokens, positions);
  bool reserved = false;
  int64_t capacity = 0;
  const int64_t head_dim = config.head_dim();
  common::Status status = state::ReadKvSpill(path, header, [&](const state::KvSpillRange& range) {
    // Called only once the whole file is known to be valid.
    if (!reserved) {
      cache.Reserve(positions);
      capacity = cache.capacity();
      reserved = true;
    }
    float* base = range.kind == state::KvKind::kKeys ? cache.KeyStorage(range.layer) : cache.ValueStorage(range.layer);
    const size_t bytes = static_cast<size_t>(range.count * head_dim) * sizeof(float);
    for (int64_t h = 0; h < config.heads; ++h) {
      std::memcpy(base + (h * capacity + range.begin) * head_dim, range.data + h * range.count * head_dim, bytes);
    }
  });
  if (!status.ok()) return status;
  cache.Advance(positions);
  return common::Status::Ok();
}

}  // namespace niels::daemon::engine
