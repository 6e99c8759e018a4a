#pragma once
// A model's tensors by the names clients know them by (proto/PROTOCOL.md, "Weight statistics"): each
// tensor of model::Weights under its Hugging Face name and its GGUF name (tensor_slots.h's one table),
// whichever format the model was loaded from, and name patterns with `*` selecting among them.
//
// A tensor that neither format stores has one name used as both: niels_gpt's fused qkv (slot
// blocks.i.wqkv) is blocks.i.attn.qkv.weight, its niels_gpt checkpoint name (niels-export writes
// it split into q, k and v); rope_freqs, which a Hugging Face directory computes from config.json,
// is rope_freqs.weight. A tied output head is the token embedding itself and has no entry.
//
// Pure naming over views of the weights; any thread.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

struct NamedTensor {
  std::string ours;  // Weights::ForEach's name ("blocks.0.w_gate")
  std::string hf;    // "model.layers.0.mlp.gate_proj.weight"
  std::string gguf;  // "blk.0.ffn_gate.weight"
  model::Tensor tensor;  // a view, valid while the weights live
};

// Every tensor of `weights` in Weights::ForEach's order.
std::vector<NamedTensor> NamedTensors(const model::Weights& weights);

// The indices of the tensors that any of `patterns` (common/name_glob.h) matches by either name, each once, in
// `tensors`' order. INVALID_ARGUMENT naming "<field>[i]" for the first pattern that matches no
// tensor.
common::StatusOr<std::vector<size_t>> SelectTensors(const std::vector<NamedTensor>& tensors,
                                                    const std::vector<std::string>& patterns,
                                                    std::string_view field);

}  // namespace niels::daemon::loaders
