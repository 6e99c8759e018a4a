#include "daemon/model/forward_step.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "daemon/kernels/matvec.h"
#include "daemon/kernels/simd_kernels.h"
#include "daemon/model/row_ops.h"

namespace niels::daemon::model {

using kernels::MatVec;
using kernels::WorkerPool;
namespace simd = kernels::simd;

namespace {

// The element `offset` of a KV block of `dtype` elements.
void* KvBlockElement(void* block, int64_t offset, Dtype dtype) {
  return static_cast<unsigned char*>(block) + offset * kernels::DtypeSize(dtype);
}

// A norm's or bias's floats (f32, weights.h), or null when the model has none.
const float* F32OrNull(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }

// H D + 2 KV D: the columns of one row's q | k | v.
int64_t QkvWidth(const ModelConfig& c) { return c.q_width() + 2 * c.kv_width(); }

}  // namespace

void FeedForwardHidden(const BlockWeights& block, const ModelConfig& config, const float* x, int64_t rows, float* a,
                       float* g, WorkerPool& pool) {
  const int64_t C = config.width, F = config.d_ff;
  MatVec(block.w_up.matrix(), F, C, F32OrNull(block.b_up), x, rows, a, pool);        // [rows, F]
  MatVec(block.w_gate.matrix(), F, C, F32OrNull(block.b_gate), x, rows, g, pool);    // [rows, F]
  const int64_t total = rows * F;
  if (rows == 1 || pool.threads() == 1) {
    simd::SiluMul(g, a, total);
  } else {
    pool.Run([&](int part, int parts) {
      const int64_t begin = rows * part / parts * F, end = rows * (part + 1) / parts * F;
      simd::SiluMul(g + begin, a + begin, end - begin);
    });
  }
}

void FeedForward(const BlockWeights& block, const ModelConfig& config, const float* x, int64_t rows, float* a,
                 float* g, float* out, WorkerPool& pool) {
  FeedForwardHidden(block, config, x, rows, a, g, pool);
  MatVec(block.w_down.matrix(), config.width, config.d_ff, F32OrNull(block.b_down), a, rows, out, pool);  // [rows, C]
}

void ForwardStep::Observe(std::span<const StepSequence> sequences, HookSite site, int64_t layer, const float* values,
                          int64_t width) {
  for (const int32_t i : observing_) {
    const StepSequence& seq = sequences[i];
    if (!seq.observer->sites().Has(site, layer)) continue;
    const int64_t first = sequence_first_row_[i];
    for (int64_t t = 0; t < seq.count; ++t) {
      seq.observer->Observe(site, layer, seq.start + t,
                            std::span<const float>(values + (first + t) * width, static_cast<size_t>(width)));
    }
  }
}

void ForwardStep::ObserveFinalNormalized(std::span<const StepSequence> sequences) {
  const int64_t C = config_.width;
  if (static_cast<int64_t>(unit_weight_.size()) != C) {
    unit_weight_.assign(static_cast<size_t>(C), 1.0f);
    observed_norm_.resize(static_cast<size_t>(C));
  }
  for (const int32_t i : observing_) {
    const StepSequence& seq = sequences[i];
    if (!seq.observer->sites().Has(HookSite::kLnFinalNormalized, -1)) continue;
    const int64_t first = sequence_first_row_[i];
    for (int64_t t = 0; t < seq.count; ++t) {  // x * (1 / rms) * 1: RmsNorm without the weight
      RmsNorm(s_.h.data() + (first + t) * C, unit_weight_.data(), 1, C, config_.rms_norm_eps, observed_norm_.data());
      seq.observer->Observe(HookSite::kLnFinalNormalized, -1, seq.start + t, observed_norm_);
    }
  }
}

ForwardStep::ForwardStep(ModelConfig config, int64_t block_tokens, std::shared_ptr<WorkerPool> pool)
    : config_(std::move(config)),
      layout_{config_.kv_head_count(), config_.head_dim(), block_tokens},
      pool_(pool != nullptr ? std::move(pool) : std::make_shared<WorkerPool>(1)) {}

void ForwardStep::Reserve(int64_t rows, int64_t positions) {
  if (positions > scores_stride_) {  // every thread's [G kQueryBlock, P] scores; P in steps of 256
    scores_stride_ = (positions + 255) / 256 * 256;
    const int64_t group = config_.heads / config_.kv_head_count();
    s_.scores.resize(static_cast<size_t>(pool_->threads() * group * kQueryBlock * scores_stride_));
  }
  if (rows <= reserved_rows_) return;
  const ModelConfig& c = config_;
  s_.h.resize(rows * c.width);
  s_.x.resize(rows * c.width);
  s_.qkv.resize(rows * QkvWidth(c));
  s_.heads.resize(rows * c.q_width());
  s_.a.resize(rows * c.d_ff);
  s_.g.resize(rows * c.d_ff);
  reserved_rows_ = rows;
}

void ForwardStep::ReleaseScratch() {
  s_ = Scratch{};
  reserved_rows_ = 0;
  scores_stride_ = 0;
}

template <typename Fn>
void ForwardStep::ForRows(int64_t n, Fn&& fn) {
  if (n < 4 || pool_->threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool_->Run([&](int part, int parts) {
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

// Attention of one key/value head for the rows of one query block, for every query head that
// reads it (grouped-query attention: heads kv * G .. kv * G + G - 1): one simd::Attend call, which
// walks the sequence's KV blocks itself (scores of every (head, row) pair, reading each key once
// for all of them; per pair the softmax over its own positions 0..P; then the probability-weighted
// values, reading each value once per register tile of pairs), so a decode row costs one call per
// key/value head, not one per query head or per KV block.
void ForwardStep::AttendBlock(std::span<const StepSequence> sequences, const QueryBlock& block, int64_t kv_head,
                              int64_t layer, int64_t trace_layer, float* scores) {
  const StepSequence& seq = sequences[block.sequence];
  const int64_t D = config_.head_dim(), size = kernels::DtypeSize(seq.kv_dtype);
  const int64_t G = config_.heads / config_.kv_head_count();
  const int64_t width = QkvWidth(config_), stride = scores_stride_;
  const simd::AttendArgs args{
      .q = s_.qkv.data() + block.first_row * width + kv_head * G * D,
      .q_stride = width,
      .rows = block.rows,
      .first_position = block.position,
      .blocks = seq.blocks,
      .block_tokens = layout_.block_tokens,
      .key_offset = layout_.Offset(layer, 0, kv_head, 0) * size,
      .value_offset = layout_.Offset(layer, 1, kv_head, 0) * size,
      .head_dim = D,
      .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))),
      .scores = scores,
      .scores_stride = stride,
      .out = s_.heads.data() + block.first_row * config_.q_width() + kv_head * G * D,
      .out_stride = config_.q_width(),
      .group = G,
      .q_group_stride = D,
      .out_group_stride = D,
  };
  simd::Attend(args, seq.kv_dtype);
  const int64_t last = seq.start + seq.count - 1;  // the traced row's position
  if (layer == trace_layer && seq.trace != nullptr && last >= block.position && last < block.position + block.rows) {
    for (int64_t g = 0; g < G; ++g) {  // its probabilities under each query head of the group
      const float* p = scores + (g * block.rows + last - block.position) * stride;
      std::copy(p, p + last + 1, seq.trace + (kv_head * G + g) * (last + 1));
    }
  }
}

void ForwardStep::ProjectQkv(const BlockWeights& block) {
  const int64_t R = static_cast<int64_t>(row_sequence_.size()), C = config_.width, width = QkvWidth(config_);
  if (block.wqkv.data != nullptr) {
    MatVec(block.wqkv.matrix(), width, C, nullptr, s_.x.data(), R, s_.qkv.data(), *pool_);  // [R, H D + 2 KV D]
    return;
  }
  const int64_t HD = config_.q_width(), KVD = config_.kv_width();
  MatVec(block.wq.matrix(), HD, C, F32OrNull(block.bq), s_.x.data(), R, s_.qkv.data(), *pool_, width);  // q [R, H D]
  MatVec(block.wk.matrix(), KVD, C, F32OrNull(block.bk), s_.x.data(), R, s_.qkv.data() + HD, *pool_,
         width);  // k [R, KV D]
  MatVec(block.wv.matrix(), KVD, C, F32OrNull(block.bv), s_.x.data(), R, s_.qkv.data() + HD + KVD, *pool_,
         width);  // v [R, KV D]
}

void ForwardStep::PrepareQueryKey(const BlockWeights& block, const float* rope, float* q, float* k) const {
  const int64_t H = config_.heads, KV = config_.kv_head_count(), D = config_.head_dim();
  const double eps = config_.rms_norm_eps;
  if (config_.qk_rows_interleaved) {
    UninterleaveHalves(q, H, D);
    UninterleaveHalves(k, KV, D);
  }
  if (const float* q_norm = F32OrNull(block.q_norm)) RmsNorm(q, q_norm, H, D, eps, q);
  if (const float* k_norm = F32OrNull(block.k_norm)) RmsNorm(k, k_norm, KV, D, eps, k);
  if (config_.rope_pairs == RopePairs::kHalves) {
    ApplyRopeHalves(q, rope, H, D);
    ApplyRopeHalves(k, rope, KV, D);
  } else {
    ApplyRope(q, rope, H, D);
    ApplyRope(k, rope, KV, D);
  }
}

// Causal self-attention of `layer` for every row, from this layer's q, k and v rows: q and k
// prepared (PrepareQueryKey), k and v written to the row's block at its position (so later rows of
// the same sequence see them), then every (query block, key/value head) pair (with all the query
// heads that read that key/value head), handed to whichever thread is free -- the last blocks (the
// longest prefixes) first, so that no thread is left with a long one at the end. Fills heads.
void ForwardStep::Attention(const BlockWeights& weights, const float* rope, std::span<const StepSequence> sequences,
                            int64_t layer, int64_t trace_layer) {
  const int64_t R = static_cast<int64_t>(row_sequence_.size()), H = config_.heads, KV = config_.kv_head_count();
  const int64_t D = config_.head_dim(), bt = layout_.block_tokens, width = QkvWidth(config_);
  ForRows(R, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t position = row_position_[r];
      float* q = s_.qkv.data() + r * width;  // [H, D]
      float* k = q + H * D;                  // [KV, D]
      const float* v = k + KV * D;           // [KV, D]
      PrepareQueryKey(weights, rope + position * D, q, k);  // rope row: [D/2, 2]
      const StepSequence& seq = sequences[row_sequence_[r]];
      void* block = seq.blocks[position / bt];
      const int64_t slot = position % bt;
      for (int64_t h = 0; h < KV; ++h) {  // narrowed to the KV dtype as stored
        simd::FromFloat(k + h * D, D, seq.kv_dtype,
                        KvBlockElement(block, layout_.Offset(layer, 0, h, slot), seq.kv_dtype));
        simd::FromFloat(v + h * D, D, seq.kv_dtype,
                        KvBlockElement(block, layout_.Offset(layer, 1, h, slot), seq.kv_dtype));
      }
    }
  });
  const int64_t items = static_cast<int64_t>(query_blocks_.size()) * KV;
  std::atomic<int64_t> next{0};
  pool_->Run([&](int part, int) {
    float* scores = s_.scores.data() + static_cast<int64_t>(part) * (H / KV) * kQueryBlock * scores_stride_;
    for (int64_t taken = next.fetch_add(1, std::memory_order_relaxed); taken < items;
         taken = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t item = items - 1 - taken;
      AttendBlock(sequences, query_blocks_[item / KV], item % KV, layer, trace_layer, scores);
    }
  });
}

int64_t ForwardStep::Run(const Weights& weights, const float* rope, std::span<const StepSequence> sequences,
                         int64_t trace_layer, float* logits) {
  const int64_t C = config_.width;
  const double eps = config_.rms_norm_eps;
  const kernels::Matrix tok_emb = weights.tok_emb.matrix();
  row_sequence_.clear();
  row_position_.clear();
  query_blocks_.clear();
  logit_rows_.clear();
  sequence_first_row_.clear();
  observing_.clear();
  for (size_t i = 0; i < sequences.size(); ++i) {
    const StepSequence& seq = sequences[i];
    const int64_t first_row = static_cast<int64_t>(row_sequence_.size());
    sequence_first_row_.push_back(first_row);
    if (seq.observer != nullptr && !seq.observer->sites().empty()) observing_.push_back(static_cast<int32_t>(i));
    for (int64_t t = 0; t < seq.count; ++t) {
      if (t >= seq.logits_from) logit_rows_.push_back(first_row + t);
      row_sequence_.push_back(static_cast<int32_t>(i));
      row_position_.push_back(seq.start + t);
    }
    for (int64_t t = 0; t < seq.count; t += kQueryBlock) {
      query_blocks_.push_back({static_cast<int32_t>(i), first_row + t, std::min(kQueryBlock, seq.count - t), seq.start + t});
    }
  }
  const int64_t R = static_cast<int64_t>(row_sequence_.size());
  if (R == 0) return 0;
  int64_t positions = 0;  // the most positions a row of this step attends to
  for (const StepSequence& seq : sequences) positions = std::max(positions, seq.start + seq.count);
  Reserve(R, positions);
  Scratch& s = s_;
  WorkerPool& pool = *pool_;
  ForRows(R, [&](int64_t begin, int64_t end) {  // h = tok_emb[token]
    for (int64_t r = begin; r < end; ++r) {
      const StepSequence& seq = sequences[row_sequence_[r]];
      EmbedRow(tok_emb, C, seq.tokens[row_position_[r] - seq.start], s.h.data() + r * C);
    }
  });
  auto norm = [&](const float* weight) {
    ForRows(R, [&](int64_t begin, int64_t end) {
      RmsNorm(s.h.data() + begin * C, weight, end - begin, C, eps, s.x.data() + begin * C);
    });
  };
  auto add_x_into_h = [&] {
    ForRows(R, [&](int64_t begin, int64_t end) {
      AddInto(s.h.data() + begin * C, s.x.data() + begin * C, (end - begin) * C);
    });
  };
  // The hook sites (hook_sites.h): one branch each when nothing observes.
  const bool observing = !observing_.empty();
  const int64_t F = config_.d_ff;
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    const BlockWeights& block = weights.blocks[layer];
    if (observing) Observe(sequences, HookSite::kResidPre, layer, s.h.data(), C);
    // h = h + wo(attention(RMSNorm_attn(h)))
    norm(block.attn_norm.f32());
    ProjectQkv(block);                                                                              // [R, H D + 2 KV D]
    Attention(block, rope, sequences, layer, trace_layer);                                          // [R, H D]
    MatVec(block.wo.matrix(), C, config_.q_width(), nullptr, s.heads.data(), R, s.x.data(), pool);  // [R, C]
    if (observing) Observe(sequences, HookSite::kAttnOut, layer, s.x.data(), C);
    add_x_into_h();
    if (observing) Observe(sequences, HookSite::kResidMid, layer, s.h.data(), C);
    // h = h + mlp(RMSNorm_ffn(h))
    norm(block.ffn_norm.f32());
    FeedForwardHidden(block, config_, s.x.data(), R, s.a.data(), s.g.data(), pool);  // [R, F]
    if (observing) Observe(sequences, HookSite::kMlpPost, layer, s.a.data(), F);
    MatVec(block.w_down.matrix(), C, F, F32OrNull(block.b_down), s.a.data(), R, s.x.data(), pool);  // [R, C]
    if (observing) Observe(sequences, HookSite::kMlpOut, layer, s.x.data(), C);
    add_x_into_h();
    if (observing) Observe(sequences, HookSite::kResidPost, layer, s.h.data(), C);
  }
  if (observing) ObserveFinalNormalized(sequences);
  // logits = RMSNorm_final(h) @ lm_head^T, only for the rows that want them.
  const int64_t n = static_cast<int64_t>(logit_rows_.size());
  const float* final_norm = weights.final_norm.f32();
  for (int64_t k = 0; k < n; ++k) RmsNorm(s.h.data() + logit_rows_[k] * C, final_norm, 1, C, eps, s.x.data() + k * C);
  if (n > 0) MatVec(weights.lm_head.matrix(), config_.vocab_size, C, nullptr, s.x.data(), n, logits, pool);  // [n, V]
  return n;
}

}  // namespace niels::daemon::model
