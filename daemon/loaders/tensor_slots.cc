#include "daemon/loaders/tensor_slots.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace niels::daemon::loaders {
namespace {

using model::BlockWeights;
using model::Tensor;
using model::Weights;

// The one table of tensor names: Weights::ForEach's name, Hugging Face's, GGUF's and niels_gpt's
// ("" where a format has no such tensor). Block rows are suffixes after "blocks.i.",
// "model.layers.i.", "blk.i." and "blocks.i."; the rows with a niels_gpt name are in niels_gpt's
// state_dict order.
struct BlockName {
  std::string_view ours;   // after "blocks.i."
  std::string_view hf;     // after "model.layers.i."
  std::string_view gguf;   // after "blk.i."
  std::string_view niels;  // after "blocks.i."
  Tensor BlockWeights::*member;
};

constexpr BlockName kBlockNames[] = {
    {"attn_norm", "input_layernorm.weight", "attn_norm.weight", "ln1.weight", &BlockWeights::attn_norm},
    {"wqkv", "", "", "attn.qkv.weight", &BlockWeights::wqkv},
    {"wq", "self_attn.q_proj.weight", "attn_q.weight", "", &BlockWeights::wq},
    {"wk", "self_attn.k_proj.weight", "attn_k.weight", "", &BlockWeights::wk},
    {"wv", "self_attn.v_proj.weight", "attn_v.weight", "", &BlockWeights::wv},
    {"bq", "self_attn.q_proj.bias", "attn_q.bias", "", &BlockWeights::bq},
    {"bk", "self_attn.k_proj.bias", "attn_k.bias", "", &BlockWeights::bk},
    {"bv", "self_attn.v_proj.bias", "attn_v.bias", "", &BlockWeights::bv},
    {"q_norm", "self_attn.q_norm.weight", "attn_q_norm.weight", "", &BlockWeights::q_norm},
    {"k_norm", "self_attn.k_norm.weight", "attn_k_norm.weight", "", &BlockWeights::k_norm},
    {"wo", "self_attn.o_proj.weight", "attn_output.weight", "attn.proj.weight", &BlockWeights::wo},
    {"ffn_norm", "post_attention_layernorm.weight", "ffn_norm.weight", "ln2.weight", &BlockWeights::ffn_norm},
    {"w_up", "mlp.up_proj.weight", "ffn_up.weight", "mlp.fc_a.weight", &BlockWeights::w_up},
    {"b_up", "mlp.up_proj.bias", "ffn_up.bias", "mlp.fc_a.bias", &BlockWeights::b_up},
    {"w_gate", "mlp.gate_proj.weight", "ffn_gate.weight", "mlp.fc_g.weight", &BlockWeights::w_gate},
    {"b_gate", "mlp.gate_proj.bias", "ffn_gate.bias", "mlp.fc_g.bias", &BlockWeights::b_gate},
    {"w_down", "mlp.down_proj.weight", "ffn_down.weight", "mlp.fc_out.weight", &BlockWeights::w_down},
    {"b_down", "mlp.down_proj.bias", "ffn_down.bias", "mlp.fc_out.bias", &BlockWeights::b_down},
};

struct TopName {
  std::string_view ours, hf, gguf, niels;
  Tensor Weights::*member;
};

constexpr TopName kTopNames[] = {
    {"tok_emb", "model.embed_tokens.weight", "token_embd.weight", "tok_emb.weight", &Weights::tok_emb},
    {"final_norm", "model.norm.weight", "output_norm.weight", "ln_f.weight", &Weights::final_norm},
    {"lm_head", "lm_head.weight", "output.weight", "", &Weights::lm_head},
    {"rope_freqs", "", "rope_freqs.weight", "", &Weights::rope_freqs},
};

std::string_view Column(const BlockName& b, TensorNaming naming) {
  switch (naming) {
    case TensorNaming::kHuggingFace: return b.hf;
    case TensorNaming::kGguf: return b.gguf;
    case TensorNaming::kNiels: return b.niels;
  }
  return {};
}

std::string_view Column(const TopName& t, TensorNaming naming) {
  switch (naming) {
    case TensorNaming::kHuggingFace: return t.hf;
    case TensorNaming::kGguf: return t.gguf;
    case TensorNaming::kNiels: return t.niels;
  }
  return {};
}

std::string BlockPrefix(TensorNaming naming, std::string_view layer) {
  const std::string_view stem = naming == TensorNaming::kHuggingFace ? "model.layers."
                                : naming == TensorNaming::kGguf      ? "blk."
                                                                     : "blocks.";
  return std::string(stem) + std::string(layer) + ".";
}

}  // namespace

std::string FileName(std::string_view ours, TensorNaming naming) {
  if (ours.rfind("blocks.", 0) == 0) {
    const size_t dot = ours.find('.', 7);
    if (dot == std::string_view::npos || dot == 7) return "";
    const std::string_view layer = ours.substr(7, dot - 7);
    if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
    const std::string_view rest = ours.substr(dot + 1);
    for (const BlockName& b : kBlockNames) {
      if (b.ours == rest) {
        const std::string_view name = Column(b, naming);
        return name.empty() ? "" : BlockPrefix(naming, layer) + std::string(name);
      }
    }
    return "";
  }
  for (const TopName& t : kTopNames) {
    if (t.ours == ours) return std::string(Column(t, naming));
  }
  return "";
}

const Tensor* FindSlot(const Weights& weights, std::string_view ours) {
  return FindSlot(const_cast<Weights&>(weights), ours);
}

Tensor* FindSlot(Weights& weights, std::string_view ours) {
  if (ours.rfind("blocks.", 0) == 0) {
    const size_t dot = ours.find('.', 7);
    if (dot == std::string_view::npos || dot == 7) return nullptr;
    size_t layer = 0;
    for (char c : ours.substr(7, dot - 7)) {
      if (c < '0' || c > '9' || layer > weights.blocks.size()) return nullptr;
      layer = layer * 10 + static_cast<size_t>(c - '0');
    }
    if (layer >= weights.blocks.size()) return nullptr;
    for (const BlockName& b : kBlockNames) {
      if (b.ours == ours.substr(dot + 1)) return &(weights.blocks[layer].*(b.member));
    }
    return nullptr;
  }
  for (const TopName& t : kTopNames) {
    if (t.ours == ours) return &(weights.*(t.member));
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> NielsTensorNames(int64_t layers) {
  std::vector<std::pair<std::string, std::string>> names;
  names.emplace_back("tok_emb", "tok_emb.weight");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string prefix = "blocks." + std::to_string(i) + ".";
    for (const BlockName& b : kBlockNames) {
      if (!b.niels.empty()) names.emplace_back(prefix + std::string(b.ours), prefix + std::string(b.niels));
    }
  }
  names.emplace_back("final_norm", "ln_f.weight");
  return names;
}

std::vector<TensorSlot> FamilyTensorSlots(const model::ModelConfig& config, TensorNaming naming, Weights* weights) {
  if (naming == TensorNaming::kNiels) throw std::logic_error("FamilyTensorSlots: niels_gpt has its own layout");
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
      slot.name = BlockPrefix(naming, layer) + std::string(Column(*entry, naming));
      slot.slot = &(weights->blocks[std::stoul(layer)].*(entry->member));
    } else {
      const TopName* entry = nullptr;
      for (const TopName& t : kTopNames) {
        if (t.ours == ours) entry = &t;
      }
      if (entry == nullptr) throw std::logic_error("FamilyTensorSlots: no file name for " + ours);
      if (hf && entry->hf.empty()) continue;  // rope_freqs: computed from config.json
      slot.name = std::string(Column(*entry, naming));
      slot.slot = &(weights->*(entry->member));
    }
    slots.push_back(std::move(slot));
  }
  return slots;
}

}  // namespace niels::daemon::loaders
