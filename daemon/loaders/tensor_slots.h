#pragma once
// The tensors of a model of the Llama family under the names each file format gives them, mapped
// onto the slots of model::Weights (docs/ARCHITECTURE.md, "Loading a model"). One table
// (tensor_slots.cc) holds every name: the loaders fill the slots by it, and weight statistics
// (tensor_names.h) name tensors by it:
//
//   Weights slot          Hugging Face (safetensors)                 GGUF (llama.cpp)
//   tok_emb               model.embed_tokens.weight                  token_embd.weight
//   blocks.i.attn_norm    model.layers.i.input_layernorm.weight      blk.i.attn_norm.weight
//   blocks.i.wq/wk/wv     model.layers.i.self_attn.{q,k,v}_proj.weight  blk.i.attn_{q,k,v}.weight
//   blocks.i.bq/bk/bv     model.layers.i.self_attn.{q,k,v}_proj.bias    blk.i.attn_{q,k,v}.bias
//   blocks.i.q/k_norm     model.layers.i.self_attn.{q,k}_norm.weight    blk.i.attn_{q,k}_norm.weight
//   blocks.i.wo           model.layers.i.self_attn.o_proj.weight     blk.i.attn_output.weight
//   blocks.i.ffn_norm     model.layers.i.post_attention_layernorm.weight  blk.i.ffn_norm.weight
//   blocks.i.w_gate/up/down (+ b_)  model.layers.i.mlp.{gate,up,down}_proj.{weight,bias}
//                                                                    blk.i.ffn_{gate,up,down}.{weight,bias}
//   final_norm            model.norm.weight                          output_norm.weight
//   lm_head (untied)      lm_head.weight                             output.weight
//   rope_freqs (llama3)   (computed from config.json)                rope_freqs.weight
//
// niels_gpt's own names (the niels directory, niels_dir.h) are a third column: tok_emb.weight,
// blocks.i.ln1.weight, blocks.i.attn.qkv.weight (the fused [3C, C] q, k, v of slot blocks.i.wqkv,
// which neither format above stores: niels-export splits it into q, k and v), blocks.i.attn.proj.weight,
// blocks.i.ln2.weight, blocks.i.mlp.fc_a/fc_g/fc_out.{weight,bias} (w_up, w_gate, w_down), ln_f.weight.
//
// Pure naming; no file access. Safe from any thread.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/model/config.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

enum class TensorNaming { kHuggingFace, kGguf, kNiels };

// A layer holds at least this many tensors (norms, q, k, v, o, gate, up, down): a file listing
// fewer than layers x this is refused before anything is sized from its layer count.
inline constexpr int64_t kTensorsPerLayer = 9;

// One tensor a model of some config must have, and where it goes.
struct TensorSlot {
  std::string name;             // in the file format's naming
  std::string ours;             // Weights::ForEach's name ("blocks.3.wq")
  std::vector<int64_t> shape;   // expected, row-major (outermost first)
  bool matrix = false;          // 2-D: kept in the file's dtype; 1-D tensors are widened to f32
  model::Tensor* slot = nullptr;
};

// The name the tensor `ours` (Weights::ForEach's name: "blocks.3.wq", "tok_emb") has in `naming`;
// "" when that format stores no such tensor (the fused qkv in Hugging Face or GGUF naming,
// rope_freqs in a Hugging Face directory, q/k/v apart in niels_gpt's) or `ours` is no slot's name.
std::string FileName(std::string_view ours, TensorNaming naming);

// The slot `ours` names in `weights` (Weights::ForEach's name); nullptr for no slot's name or a
// layer `weights` does not have.
model::Tensor* FindSlot(model::Weights& weights, std::string_view ours);
const model::Tensor* FindSlot(const model::Weights& weights, std::string_view ours);

// niels_gpt's name for every tensor slot of a niels_gpt model of `layers` layers
// (Weights::ForEach's name, niels_gpt's), in the state_dict order.
std::vector<std::pair<std::string, std::string>> NielsTensorNames(int64_t layers);

// Every tensor a model of `config` stores in `naming` (model::ExpectedShapes with q, k and v
// apart, less the rope_freqs a Hugging Face config implies), each pointing at its slot of
// *weights, whose blocks are resized to config.layers. REQUIRES: ValidateModelConfig(config) is OK;
// naming is kHuggingFace or kGguf.
std::vector<TensorSlot> FamilyTensorSlots(const model::ModelConfig& config, TensorNaming naming,
                                          model::Weights* weights);

}  // namespace niels::daemon::loaders
