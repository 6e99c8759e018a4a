// simd::Attend (simd_kernels.h), the forward step's attention of one (query block, key/value head),
// under every implementation this CPU can run, with f32, f16 and bf16 KV blocks and head dims that
// reach every branch (full chunks of 4 vectors, single vectors, a masked tail): against a plain
// softmax-attention loop in double, and bitwise invariant to what the forward step relies on --
// the other rows of the call, the query heads sharing it (grouped-query attention, 1, 2 or 4 query
// heads per key/value head), and how the positions are split into KV blocks.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/kernels/dtype.h"
#include "daemon/kernels/simd_kernels.h"
#include "tests/daemon/kernels/forced_isa_test.h"

namespace niels::daemon::kernels {
namespace {
namespace attend_test {  // this file's own names: the suite compiles as one unity unit

using simd::Isa;

// The bytes of block slots no position was written to: NaN in f32, f16 and bf16 alike, so that a
// kernel reading past a row's last position, or past the sequence, spoils its result.
constexpr uint8_t kUnwritten = 0xff;

// One head's keys and values for `positions` positions, stored in blocks of `block_tokens` as the
// KV pool does (keys, then values, [block_tokens, D] each, in `dtype`), with their exact values.
struct Sequence {
  int64_t positions, head_dim, block_tokens;
  Dtype dtype;
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<const void*> pointers;
  std::vector<float> keys, values;  // [positions, D], as stored (rounded), widened exactly

  int64_t value_offset() const { return block_tokens * head_dim * DtypeSize(dtype); }
};

Sequence MakeSequence(int64_t positions, int64_t head_dim, int64_t block_tokens, Dtype dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Sequence s{positions, head_dim, block_tokens, dtype, {}, {}, {}, {}};
  const int64_t size = DtypeSize(dtype);
  for (int64_t first = 0; first < positions; first += block_tokens) {
    s.blocks.emplace_back(static_cast<size_t>(2 * block_tokens * head_dim * size), kUnwritten);
  }
  for (int kv = 0; kv < 2; ++kv) {
    std::vector<float>& exact = kv == 0 ? s.keys : s.values;
    for (int64_t p = 0; p < positions; ++p) {
      for (int64_t d = 0; d < head_dim; ++d) {
        const float x = normal(rng);
        uint8_t* at = s.blocks[p / block_tokens].data() +
                      ((kv * block_tokens + p % block_tokens) * head_dim + d) * size;
        if (dtype == Dtype::kF32) {
          std::memcpy(at, &x, 4);
        } else {
          const uint16_t h = dtype == Dtype::kF16 ? FloatToHalf(x) : FloatToBFloat16(x);
          std::memcpy(at, &h, 2);
        }
        exact.push_back(ElementToFloat(at, dtype, 0));
      }
    }
  }
  for (const auto& block : s.blocks) s.pointers.push_back(block.data());
  return s;
}

// The same positions re-stored in blocks of another size (the same stored values).
Sequence Reblocked(const Sequence& s, int64_t block_tokens) {
  Sequence t{s.positions, s.head_dim, block_tokens, s.dtype, {}, {}, s.keys, s.values};
  const int64_t size = DtypeSize(s.dtype), D = s.head_dim;
  for (int64_t first = 0; first < s.positions; first += block_tokens) {
    t.blocks.emplace_back(static_cast<size_t>(2 * block_tokens * D * size), kUnwritten);
  }
  for (int kv = 0; kv < 2; ++kv) {
    for (int64_t p = 0; p < s.positions; ++p) {
      const uint8_t* from = s.blocks[p / s.block_tokens].data() + ((kv * s.block_tokens + p % s.block_tokens) * D) * size;
      uint8_t* to = t.blocks[p / block_tokens].data() + ((kv * block_tokens + p % block_tokens) * D) * size;
      std::memcpy(to, from, static_cast<size_t>(D * size));
    }
  }
  for (const auto& block : t.blocks) t.pointers.push_back(block.data());
  return t;
}

struct Result {
  std::vector<float> out;    // [rows, D]
  std::vector<float> probs;  // [rows, stride]; row i's first first + i + 1 entries are meaningful
  std::vector<float> Probs(int64_t i, int64_t m, int64_t stride) const {
    return {probs.begin() + i * stride, probs.begin() + i * stride + m};
  }
};

// Attend for query rows [row0, row0 + rows) of `q` [*, D] at positions first + 0, 1, ...
Result RunAttend(const Sequence& s, const std::vector<float>& q, int64_t row0, int64_t rows, int64_t first, int64_t stride) {
  const int64_t D = s.head_dim;
  Result r{std::vector<float>(static_cast<size_t>(rows * D), -1.0f),
           std::vector<float>(static_cast<size_t>(rows * stride), -1.0f)};
  simd::AttendArgs args{q.data() + row0 * D, D, rows, first, s.pointers.data(), s.block_tokens,
                        0, s.value_offset(), D, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))),
                        r.probs.data(), stride, r.out.data(), D};
  simd::Attend(args, s.dtype);
  return r;
}

// Parameters: (implementation, head dim, KV dtype).
using Params = std::tuple<Isa, int64_t, Dtype>;

class AttendTest : public ForcedIsaTest<Params> {
 protected:
  int64_t D() const { return std::get<1>(GetParam()); }
  Dtype dtype() const { return std::get<2>(GetParam()); }
};

TEST_P(AttendTest, MatchesPlainAttentionInDouble) {
  const int64_t positions = 53;  // 3 full blocks of 16 and 5 positions
  const Sequence s = MakeSequence(positions, D(), 16, dtype(), 1);
  const int64_t rows = 16, first = positions - rows, stride = 64;
  const std::vector<float> q = [&] {
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(rows * D()));
    for (float& x : v) x = normal(rng);
    return v;
  }();
  const Result r = RunAttend(s, q, 0, rows, first, stride);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = first + i + 1;
    std::vector<double> p(static_cast<size_t>(m));
    double max = -1e300, total = 0;
    for (int64_t j = 0; j < m; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D(); ++d) dot += static_cast<double>(q[i * D() + d]) * s.keys[j * D() + d];
      p[j] = dot / std::sqrt(static_cast<double>(D()));
      max = std::max(max, p[j]);
    }
    for (double& x : p) total += (x = std::exp(x - max));
    for (int64_t j = 0; j < m; ++j) {
      ASSERT_NEAR(r.probs[i * stride + j], p[j] / total, 1e-6) << "row " << i << " key " << j;
    }
    for (int64_t d = 0; d < D(); ++d) {
      double sum = 0;
      for (int64_t j = 0; j < m; ++j) sum += p[j] / total * s.values[j * D() + d];
      ASSERT_NEAR(r.out[i * D() + d], sum, 2e-5) << "row " << i << " column " << d;
    }
  }
}

// A row's output and probabilities are bitwise the same computed alone (a decode step), among the
// 16 rows of a prefill query block, or among 5, and with the sequence stored in blocks of 16, 5 or
// one block for everything.
TEST_P(AttendTest, ARowIsBitwiseTheSameWhateverTheOtherRowsAndTheBlockSize) {
  const int64_t positions = 70;
  const Sequence s16 = MakeSequence(positions, D(), 16, dtype(), 3);
  const Sequence s5 = Reblocked(s16, 5), s_one = Reblocked(s16, positions);
  std::vector<float> q(static_cast<size_t>(16 * D()));
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : q) x = normal(rng);
  const int64_t first = positions - 16, stride = 80;
  const Result block = RunAttend(s16, q, 0, 16, first, stride);
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t m = first + i + 1;
    const std::vector<float> out(block.out.begin() + i * D(), block.out.begin() + (i + 1) * D());
    for (const Sequence* s : {&s16, &s5, &s_one}) {
      const Result alone = RunAttend(*s, q, i, 1, first + i, stride);
      ASSERT_EQ(alone.out, out) << "row " << i << ", blocks of " << s->block_tokens;
      ASSERT_EQ(alone.Probs(0, m, stride), block.Probs(i, m, stride)) << "row " << i;
    }
    if (i >= 11) {  // in a call of 5 rows (a remainder tile of every size)
      const Result five = RunAttend(s5, q, 11, 5, first + 11, stride);
      ASSERT_EQ(std::vector<float>(five.out.begin() + (i - 11) * D(), five.out.begin() + (i - 10) * D()), out);
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<Params>& info) {
  const auto [isa, d, dtype] = info.param;
  return IsaName(isa) + "_D" + std::to_string(d) + "_" + std::string(DtypeName(dtype));
}

// D 64 (the model shapes), 136 (8 x 16 + 8: chunks of 4 vectors, single vectors, a tail), 20 (a
// vector and a tail, or a tail only).
INSTANTIATE_TEST_SUITE_P(IsasDimsDtypes, AttendTest,
                         ::testing::Combine(::testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                                            ::testing::Values(int64_t{64}, int64_t{136}, int64_t{20}),
                                            ::testing::Values(Dtype::kF32, Dtype::kF16, Dtype::kBF16)),
                         ParamName);

// Grouped-query attention over a deep prefix: `group` query heads share the call, laid out as the
// forward step lays them out (a row holds every query head, head_dim apart, plus other columns).
// Parameters: (implementation, head dim, KV dtype, query heads per key/value head).
using GroupParams = std::tuple<Isa, int64_t, Dtype, int64_t>;

class AttendGroupTest : public ForcedIsaTest<GroupParams> {
 protected:
  int64_t D() const { return std::get<1>(GetParam()); }
  Dtype dtype() const { return std::get<2>(GetParam()); }
  int64_t G() const { return std::get<3>(GetParam()); }
  int64_t RowWidth() const { return G() * D() + 24; }  // query heads, then columns no head reads

  std::vector<float> Queries(int64_t rows, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    std::vector<float> q(static_cast<size_t>(rows * RowWidth()));
    for (float& x : q) x = normal(rng);
    return q;
  }

  // Attend for rows [row0, row0 + rows) of q (every head of the group from `head0`, `heads` of
  // them) at positions first, first + 1, ...; outputs laid out like q.
  Result Run(const Sequence& s, const std::vector<float>& q, int64_t row0, int64_t rows, int64_t first,
             int64_t head0, int64_t heads, int64_t stride) const {
    const int64_t W = RowWidth();
    Result r{std::vector<float>(static_cast<size_t>(rows * W), -1.0f),
             std::vector<float>(static_cast<size_t>(heads * rows * stride), -1.0f)};
    simd::AttendArgs args{.q = q.data() + row0 * W + head0 * D(), .q_stride = W, .rows = rows,
                          .first_position = first, .blocks = s.pointers.data(), .block_tokens = s.block_tokens,
                          .key_offset = 0, .value_offset = s.value_offset(), .head_dim = D(),
                          .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D()))),
                          .scores = r.probs.data(), .scores_stride = stride, .out = r.out.data() + head0 * D(),
                          .out_stride = W, .group = heads, .q_group_stride = D(), .out_group_stride = D()};
    simd::Attend(args, s.dtype);
    return r;
  }
};

// Two query blocks deep into the prefix (the second crossing a block boundary): every (head, row)
// against softmax attention in double.
TEST_P(AttendGroupTest, MatchesPlainAttentionInDouble) {
  const int64_t rows = 16, first = 150, positions = first + rows, stride = positions + 3;
  const Sequence s = MakeSequence(positions, D(), 16, dtype(), 11);
  const std::vector<float> q = Queries(rows, 12);
  const Result r = Run(s, q, 0, rows, first, 0, G(), stride);
  for (int64_t g = 0; g < G(); ++g) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t m = first + i + 1, n = g * rows + i;
      const float* query = q.data() + i * RowWidth() + g * D();
      std::vector<double> p(static_cast<size_t>(m));
      double max = -1e300, total = 0;
      for (int64_t j = 0; j < m; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D(); ++d) dot += static_cast<double>(query[d]) * s.keys[j * D() + d];
        p[j] = dot / std::sqrt(static_cast<double>(D()));
        max = std::max(max, p[j]);
      }
      for (double& x : p) total += (x = std::exp(x - max));
      for (int64_t j = 0; j < m; ++j) {
        ASSERT_NEAR(r.probs[n * stride + j], p[j] / total, 1e-6) << "head " << g << " row " << i << " key " << j;
      }
      for (int64_t d = 0; d < D(); ++d) {
        double sum = 0;
        for (int64_t j = 0; j < m; ++j) sum += p[j] / total * s.values[j * D() + d];
        ASSERT_NEAR(r.out[i * RowWidth() + g * D() + d], sum, 2e-5) << "head " << g << " row " << i << " col " << d;
      }
    }
  }
}

// Each (head, row) of a grouped call of 16 rows is bitwise the same as that head alone for that row
// alone (a decode step of a model without grouping), as 7 rows from the middle of the block (other
// register tiles and a tile limit inside a KV block), and with the prefix in blocks of 16 or 5;
// the columns no head reads are left alone.
TEST_P(AttendGroupTest, EveryRowIsBitwiseTheSameAsAloneOrInOtherTiles) {
  const int64_t rows = 16, first = 201, positions = first + rows, stride = positions;
  const Sequence s16 = MakeSequence(positions, D(), 16, dtype(), 13);
  const Sequence s5 = Reblocked(s16, 5);
  const std::vector<float> q = Queries(rows, 14);
  const Result all = Run(s16, q, 0, rows, first, 0, G(), stride);
  const Result middle = Run(s5, q, 5, 7, first + 5, 0, G(), stride);
  const int64_t W = RowWidth();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = G() * D(); c < W; ++c) {
      ASSERT_EQ(all.out[i * W + c], -1.0f);
    }
  }
  for (int64_t g = 0; g < G(); ++g) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t m = first + i + 1;
      const auto row = [&](const Result& r, int64_t k) {
        return std::vector<float>(r.out.begin() + k * W + g * D(), r.out.begin() + k * W + (g + 1) * D());
      };
      const Result alone = Run(i % 2 == 0 ? s16 : s5, q, i, 1, first + i, g, 1, stride);
      ASSERT_EQ(row(alone, 0), row(all, i)) << "head " << g << " row " << i;
      ASSERT_EQ(alone.Probs(0, m, stride), all.Probs(g * rows + i, m, stride)) << "head " << g << " row " << i;
      if (i >= 5 && i < 12) {
        ASSERT_EQ(row(middle, i - 5), row(all, i)) << "head " << g << " row " << i;
      }
    }
  }
}

std::string GroupParamName(const ::testing::TestParamInfo<GroupParams>& info) {
  const auto [isa, d, dtype, group] = info.param;
  return ParamName(::testing::TestParamInfo<Params>({isa, d, dtype}, info.index)) + "_G" + std::to_string(group);
}

// D 128 (Qwen3's: chunks of 4 vectors), 20 (a vector and a tail, or a tail only).
INSTANTIATE_TEST_SUITE_P(IsasDimsDtypesGroups, AttendGroupTest,
                         ::testing::Combine(::testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                                            ::testing::Values(int64_t{128}, int64_t{20}),
                                            ::testing::Values(Dtype::kF32, Dtype::kF16),
                                            ::testing::Values(int64_t{1}, int64_t{2}, int64_t{4})),
                         GroupParamName);

}  // namespace attend_test
}  // namespace
}  // namespace niels::daemon::kernels
