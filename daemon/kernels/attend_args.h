#pragma once
// AttendArgs: the arguments of simd::Attend (simd_kernels.h), in a header of its own because the
// per-ISA kernel files may include nothing that defines inline functions (simd_table.h). Plain
// data, no functions.

#include <cstdint>

namespace niels::daemon::kernels::simd {

// Causal attention of the `group` query heads that share one key/value head (grouped-query
// attention; 1 without it) for `rows` consecutive query rows of one sequence, over that sequence's
// keys and values held in KV blocks of `block_tokens` positions each. The call's rows are the
// group * rows pairs (query head g, row i), numbered n = g * rows + i.
struct AttendArgs {
  const float* q;    // (g, i)'s query: head_dim floats at q + g * q_group_stride + i * q_stride
  int64_t q_stride;
  int64_t rows;            // >= 1; row i is at position first_position + i and attends to keys
  int64_t first_position;  // 0 .. first_position + i (its own included)
  const void* const* blocks;  // blocks[b] holds positions [b * block_tokens, (b + 1) * block_tokens)
  int64_t block_tokens;
  int64_t key_offset;    // bytes from a block's start to this head's keys: [block_tokens, head_dim]
  int64_t value_offset;  // ... and to its values, elements of the KV dtype
  int64_t head_dim;
  float scale;            // of the scores before the softmax (1 / sqrt(head_dim))
  float* scores;          // scratch [group * rows, >= first_position + rows]; row n = g * rows + i
  int64_t scores_stride;  // holds (g, i)'s probabilities on return (its first first_position + i + 1)
  float* out;             // (g, i)'s output: head_dim floats at out + g * out_group_stride + i * out_stride
  int64_t out_stride;
  int64_t group = 1;             // >= 1: query heads of the call
  int64_t q_group_stride = 0;    // floats from one query head's row to the next head's
  int64_t out_group_stride = 0;  // ... and of the outputs
};

}  // namespace niels::daemon::kernels::simd
