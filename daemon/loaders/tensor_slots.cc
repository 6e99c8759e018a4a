#include "daemon/loaders/tensor_slots.h"

#include <stdexcept>
#include <string_view>

namespace niels::daemon::loaders {
namespace {

using model::BlockWeights;
using model::Tensor;
using model::Weights;

struct BlockName {
  std::string_view ours;  // after "blocks.i."
  std::string_view hf;    // after "model.layers.i."
  std::string_view gguf;  // after "blk.i."
  Tensor BlockWeights::*member;
};

constexpr BlockName kBlockNames[] = {
    {"attn_norm", "input_layernorm.weight", "attn_norm.weight", &BlockWeights::attn_norm},
    {"wq", "self_attn.q_proj.weight", "attn_q.weight", &BlockWeights::wq},
    {"wk", "self_attn.k_proj.weight", "attn_k.weight", &BlockWeights::wk},
    {"wv", "self_attn.v_proj.weight", "attn_v.weight", &BlockWeights::wv},
    {"bq", "self_attn.q_proj.bias", "attn_q.bias", &BlockWeights::bq},
    {"bk", "self_attn.k_proj.bias", "attn_k.bias", &BlockWeights::bk},
    {"bv", "self_attn.v_proj.bias", "attn_v.bias", &BlockWeights::bv},
    {"q_norm", "self_attn.q_norm.weight", "attn_q_norm.weight", &BlockWeights::q_norm},
    {"k_norm", "self_attn.k_norm.weight", "attn_k_norm.weight", &BlockWeights::k_norm},
    {"wo", "self_attn.o_proj.weight", "attn_output.weight", &BlockWeights::wo},
    {"ffn_norm", "post_attention_layernorm.weight", "ffn_norm.weight", &BlockWeights::ffn_norm},
    {"w_gate", "mlp.gate_proj.weight", "ffn_gate.weight", &BlockWeights::w_gate},
    {"b_gate", "mlp.gate_proj.bias", "ffn_gate.bias", &BlockWeights::b_gate},
    {"w_up", "mlp.up_proj.weight", "ffn_up.weight", &BlockWeights::w_up},
    {"b_up", "mlp.up_proj.bias", "ffn_up.bias", &BlockWeights::b_up},
    {"w_down", "mlp.down_proj.weight", "ffn_down.weight", &BlockWeights::w_down},
    {"b_down", "mlp.down_proj.bias", "ffn_down.bias", &BlockWeights::b_down},
};

struct TopName {
  std::string_view ours, hf, gguf;
  Tensor Weights::*member;
};

constexpr TopName kTopNames[] = {
    {"tok_emb", "model.embed_tokens.weight", "token_embd.weight", &Weights::tok_emb},
    {"final_norm", "model.norm.weight", "output_norm.weight", &Weights::final_norm},
    {"lm_head", "lm_head.weight", "output.weight", &Weights::lm_head},
    {"rope_freqs", "", "rope_freqs.weight", &Weights::rope_freqs},
};

}  // namespace

std::vector<TensorSlot> FamilyTensorSlots(const model::ModelConfig& config, TensorNaming naming, Weights* weights) {
  const bool hf = naming == TensorNaming::kHuggingFace;
  weights->blocks.resize(static_cast<size_t>(config.layers));
  std::vector<TensorSlot> slots;
  for (auto& [ours, shape] : model::ExpectedShapes(config, /*fused_qkv=*/false)) {
    TensorSlot slot;
    slot.ours = ours;
    slot.shape = shape;
    slot.matrix = shape.size() == 2;
    if (ours.rfind("blocks.", 0) == 0) {
      const size_t dot = ours.find('.', 7);
      const std::string layer = ours.substr(7, dot - 7);
      const std::string_view rest = std::string_view(ours).substr(dot + 1);
      const BlockName* entry = nullptr;
      for (const BlockName& b : kBlockNames) {
        if (b.ours == rest) entry = &b;
      }
      if (entry == nullptr) throw std::logic_error("FamilyTensorSlots: no file name for " + ours);
      slot.name = hf ? "model.layers." + layer + "." + std::string(entry->hf)
                     : "blk." + layer + "." + std::string(entry->gguf);
      slot.slot = &(weights->blocks[std::stoul(layer)].*(entry->member));
    } else {
      const TopName* entry = nullptr;
      for (const TopName& t : kTopNames) {
        if (t.ours == ours) entry = &t;
      }
      if (entry == nullptr) throw std::logic_error("FamilyTensorSlots: no file name for " + ours);
      if (hf && entry->hf.empty()) continue;  // rope_freqs: computed from config.json
      slot.name = std::string(hf ? entry->hf : entry->gguf);
      slot.slot = &(weights->*(entry->member));
    }
    slots.push_back(std::move(slot));
  }
  return slots;
}

}  // namespace niels::daemon::loaders
