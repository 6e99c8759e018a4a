#include "daemon/engine/kv_spill.h"

#include <algorithm>
#include <cstring>

namespace niels::daemon::engine {

state::KvSpillHeader SpillHeader(const model::ModelConfig& config, kernels::Dtype kv_dtype,
                                 const std::string& model_fingerprint, std::span<const int32_t> tokens,
                                 int64_t positions) {
  state::KvSpillHeader header;
  header.model_fingerprint = model_fingerprint;
  header.dtype = kv_dtype == kernels::Dtype::kF16 ? state::KvSpillDtype::kF16 : state::KvSpillDtype::kF32;
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
  const model::KvPool& pool = cache.pool();
  auto writer =
      state::KvSpillWriter::Create(path, SpillHeader(config, pool.dtype(), model_fingerprint, tokens, positions));
  if (!writer.ok()) return writer.status();
  // One range per block, layer and kind: a block holds [H][bt][D] per layer and kind.
  const int64_t bt = model::KvPool::kBlockTokens;
  const int64_t head_stride = bt * config.head_dim();
  for (size_t b = 0; b < cache.block_ids().size(); ++b) {
    const int64_t begin = static_cast<int64_t>(b) * bt;
    const int64_t count = std::min(bt, positions - begin);
    if (count <= 0) break;
    const model::BlockId block = cache.block_ids()[b];
    for (int64_t layer = 0; layer < config.layers; ++layer) {
      const auto l = static_cast<uint32_t>(layer);
      NIELS_RETURN_IF_ERROR((*writer)->AddRange(l, state::KvKind::kKeys, begin, count,
                                                pool.Row(block, layer, 0, 0, 0), head_stride));
      NIELS_RETURN_IF_ERROR((*writer)->AddRange(l, state::KvKind::kValues, begin, count,
                                                pool.Row(block, layer, 1, 0, 0), head_stride));
    }
  }
  return (*writer)->Finish();
}

common::Status ReadKvSpillInto(model::KvCache& cache, std::span<const int32_t> tokens, int64_t positions,
                               const model::ModelConfig& config, const std::string& model_fingerprint,
                               const std::filesystem::path& path) {
  model::KvPool& pool = cache.pool();
  const state::KvSpillHeader header = SpillHeader(config, pool.dtype(), model_fingerprint, tokens, positions);
  bool prepared = false;
  bool no_memory = false;
  const int64_t head_dim = config.head_dim();
  const int64_t bt = model::KvPool::kBlockTokens;
  const size_t row_bytes = static_cast<size_t>(head_dim * kernels::DtypeSize(pool.dtype()));
  common::Status status = state::ReadKvSpill(path, header, [&](const state::KvSpillRange& range) {
    // Called only once the whole file is known to be valid.
    if (!prepared) {
      prepared = true;
      no_memory = !cache.PrepareWrite(positions);
    }
    if (no_memory) return;
    const int kind = range.kind == state::KvKind::kKeys ? 0 : 1;
    for (int64_t h = 0; h < config.heads; ++h) {
      for (int64_t i = 0; i < range.count; ++i) {
        const int64_t p = range.begin + i;
        const model::BlockId block = cache.block_ids()[static_cast<size_t>(p / bt)];
        std::memcpy(pool.Row(block, static_cast<int64_t>(range.layer), kind, h, p % bt),
                    static_cast<const unsigned char*>(range.data) + static_cast<size_t>(h * range.count + i) * row_bytes,
                    row_bytes);
      }
    }
  });
  if (!status.ok()) return status;
  if (no_memory) {
    cache.Clear();
    return common::Status::ResourceExhausted("no KV memory to read the spill file into");
  }
  cache.Commit(tokens.first(static_cast<size_t>(positions)));
  return common::Status::Ok();
}

}  // namespace niels::daemon::engine
