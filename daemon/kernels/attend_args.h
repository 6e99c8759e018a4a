#pragma once
// AttendArgs: the arguments of simd::Attend (simd_kernels.h), in a header of its own because the
// per-ISA kernel files may include nothing that defines inline functions (simd_table.h). Plain
// data, no functions.

#include <cstdint>

namespace niels::daemon::kernels::simd {

// Causal attention of one head for `rows` consecutive query rows of one sequence, over that
// sequence's keys and values held in KV blocks of `block_tokens` positions each.
struct AttendArgs {
  const float* q;    // row i's query: head_dim floats at q + i * q_stride
  int64_t q_stride;
  int64_t rows;            // >= 1; row i is at position first_position + i and attends to keys
  int64_t first_position;  // 0 .. first_position + i (its own included)
  const void* const* blocks;  // blocks[b] holds positions [b * block_tokens, (b + 1) * block_tokens)
  int64_t block_tokens;
  int64_t key_offset;    // bytes from a block's start to this head's keys: [block_tokens, head_dim]
  int64_t value_offset;  // ... and to its values, elements of the KV dtype
  int64_t head_dim;
  float scale;            // of the scores before the softmax (1 / sqrt(head_dim))
  float* scores;          // scratch [rows, >= first_position + rows]; row i's probabilities on return
  int64_t scores_stride;  // (its first first_position + i + 1 entries)
  float* out;             // row i's output: head_dim floats at out + i * out_stride
  int64_t out_stride;
};

}  // namespace niels::daemon::kernels::simd
