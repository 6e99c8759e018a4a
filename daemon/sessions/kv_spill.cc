#include "daemon/sessions/kv_spill.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/log.h"

namespace niels::daemon::sessions {

state::KvSpillHeader SpillHeader(const model::ModelConfig& config, kernels::Dtype kv_dtype,
                                 const std::string& model_fingerprint, std::span<const int32_t> tokens,
                                 int64_t positions) {
  state::KvSpillHeader header;
  header.model_fingerprint = model_fingerprint;
  header.dtype = kv_dtype == kernels::Dtype::kF16 ? state::KvSpillDtype::kF16 : state::KvSpillDtype::kF32;
  header.layers = static_cast<uint32_t>(config.layers);
  header.heads = static_cast<uint32_t>(config.kv_head_count());
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
    for (int64_t h = 0; h < config.kv_head_count(); ++h) {
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

KvSpiller::KvSpiller(const model::ModelConfig& config, kernels::Dtype kv_dtype, state::DurableStore* durable)
    : config_(config), kv_dtype_(kv_dtype), durable_(durable) {}

bool KvSpiller::SpillPaysOff(uint64_t bytes, int64_t tokens) const {
  // Unmeasured so far: try it (the first read measures the disk, the first prefill the model).
  if (read_bytes_per_s_ <= 0 || prefill_tokens_per_s_ <= 0) return true;
  return static_cast<double>(bytes) / read_bytes_per_s_ < static_cast<double>(tokens) / prefill_tokens_per_s_;
}

void KvSpiller::SpillAndDropCache(Session& session) {
  if (durable_ && session.cached_tokens() > 0) {
    const int64_t positions = session.cached_tokens();
    const std::string& fingerprint = durable_->options().model_fingerprint;
    const uint64_t bytes =
        state::KvSpillFileBytes(SpillHeader(config_, kv_dtype_, fingerprint, session.tokens(), positions));
    state::KvSpillStore& spill = durable_->spill();
    if (SpillPaysOff(bytes, positions) && spill.Reserve(session.id(), bytes)) {
      auto written = WriteKvSpill(session.sequence().cache, session.tokens(), config_, fingerprint,
                                  spill.PathFor(session.id()));
      if (written.ok()) {
        spill.Add(session.id(), *written);
        ++counters_.spill_writes;
      } else {
        common::LogWarn("state: cannot spill the KV cache of session {}: {}", session.id(),
                        written.status().ToString());
      }
    }
  }
  session.DropCache();
}

void KvSpiller::RestoreSpilledCache(Session& session) {
  if (!durable_ || session.cached_tokens() > 0) return;
  state::KvSpillStore& spill = durable_->spill();
  std::optional<std::filesystem::path> path = spill.Take(session.id());
  if (!path) return;
  const std::string& fingerprint = durable_->options().model_fingerprint;
  auto positions = state::PeekKvSpillPositions(*path);
  if (positions.ok() && *positions > 0 && *positions <= session.length()) {
    const uint64_t bytes =
        state::KvSpillFileBytes(SpillHeader(config_, kv_dtype_, fingerprint, session.tokens(), *positions));
    if (SpillPaysOff(bytes, *positions)) {
      const auto start = std::chrono::steady_clock::now();
      const common::Status read =
          ReadKvSpillInto(session.sequence().cache, session.tokens(), *positions, config_, fingerprint, *path);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (read.ok()) {
        ++counters_.spill_reads;
        const double rate = static_cast<double>(bytes) / std::max(seconds, 1e-6);
        read_bytes_per_s_ = read_bytes_per_s_ <= 0 ? rate : 0.8 * read_bytes_per_s_ + 0.2 * rate;
      } else {
        ++counters_.spill_read_failures;
        common::LogInfo("state: KV spill of session {} not used ({}); recomputing it", session.id(), read.message());
      }
    }
  }
  spill.Discard(session.id());
}

void KvSpiller::Discard(const Session& session) {
  if (durable_) durable_->spill().Discard(session.id());
}

void KvSpiller::RecordPrefill(int64_t tokens, double seconds) {
  if (tokens < 16 || seconds <= 0) return;  // too small to tell the rate from the overhead
  const double rate = static_cast<double>(tokens) / seconds;
  prefill_tokens_per_s_ = prefill_tokens_per_s_ <= 0 ? rate : 0.8 * prefill_tokens_per_s_ + 0.2 * rate;
}

}  // namespace niels::daemon::sessions
