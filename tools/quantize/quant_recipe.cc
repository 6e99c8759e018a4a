#include "tools/quantize/quant_recipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>
#include <string>

namespace niels::tools::quantize {
namespace {

using common::Status;
using formats::GgmlType;

// llama.cpp's broad tensor categories (by name, whatever the architecture).
enum class Category {
  kTokenEmbd,
  kAttentionQ,
  kAttentionV,
  kAttentionK,
  kAttentionQkv,
  kAttentionKvB,
  kAttentionOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOutput,
  kOther,
};

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The first matching rule wins, in llama.cpp's order.
Category CategoryOf(std::string_view name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (Contains(name, "attn_qkv.weight")) return Category::kAttentionQkv;
  if (Contains(name, "attn_kv_b.weight")) return Category::kAttentionKvB;
  if (Contains(name, "attn_v.weight")) return Category::kAttentionV;
  if (Contains(name, "attn_k.weight")) return Category::kAttentionK;
  if (Contains(name, "attn_q.weight")) return Category::kAttentionQ;
  if (Contains(name, "attn_output.weight")) return Category::kAttentionOutput;
  if (Contains(name, "ffn_up")) return Category::kFfnUp;
  if (Contains(name, "ffn_gate")) return Category::kFfnGate;
  if (Contains(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

// The value projections (alone or fused) are the most sensitive to quantization.
bool IsAttentionVLike(Category c) {
  return c == Category::kAttentionV || c == Category::kAttentionQkv || c == Category::kAttentionKvB;
}

// llama.cpp's use_more_bits: the first and the last eighth of n and every third one in between.
bool UseMoreBits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// N of a "blk.N." name; -1 for other names. (llama.cpp reads it with sscanf "blk.%d.", which also
// takes a sign or spaces; the names it writes have neither.)
int64_t LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int64_t layer = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && layer < (int64_t{1} << 31); ++i) {
    layer = layer * 10 + (name[i] - '0');
  }
  return i == kPrefix.size() ? -1 : layer;
}

// Substrings of names llama.cpp never quantizes (small or special tensors of other architectures
// too: MoE routers, conv and RWKV weights, vision and audio parts).
constexpr std::string_view kKeptNameParts[] = {
    "_norm.weight",          "ffn_gate_inp.weight",    "ffn_gate_tid2eid.weight",   "altup",
    "laurel",                "per_layer_model_proj",   "ssm_conv1d",                "shortconv.conv.weight",
    "indexer.k_proj.weight", "indexer.q_proj.weight",  "time_mix_first.weight",     "time_mix_w0.weight",
    "time_mix_w1.weight",    "time_mix_w2.weight",     "time_mix_v0.weight",        "time_mix_v1.weight",
    "time_mix_v2.weight",    "time_mix_a0.weight",     "time_mix_a1.weight",        "time_mix_a2.weight",
    "time_mix_g1.weight",    "time_mix_g2.weight",     "time_mix_decay_w1.weight",  "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",            "sam.pos_embd",
    "sam.neck.",             "sam.net_",               ".rel_pos",                  ".patch_embd",
    ".patch_merger",         "a.rvq.codebook",         "mm.a.code_embd",
};

// The type chosen by llama.cpp's rules for one quantized tensor, before the row-length fallback.
struct RecipeState {
  FileType file_type;
  GgmlType default_type;
  bool tied_embeddings = true;  // no output.weight: token_embd is also the output head
  bool is_70b = false;          // llama.cpp's LLM_TYPE_70B: its attn_v gets more bits
  int64_t layers = 0;
  int64_t attention_v_count = 0;
  int64_t attention_v_seen = 0;
  int64_t ffn_down_seen = 0;
};

GgmlType ChooseType(RecipeState& s, const SourceTensor& t) {
  const Category category = CategoryOf(t.name);
  const bool k_mix = s.file_type == FileType::kQ4_K_M || s.file_type == FileType::kQ5_K_M;
  GgmlType type = s.default_type;
  if (category == Category::kOutput || (s.tied_embeddings && category == Category::kTokenEmbd)) {
    // The output head: q6_K, unless the file is q8_0, or the rows are not whole blocks of the
    // default type (then q8_0).
    if (t.row_length() % formats::GgmlTypeInfo(s.default_type).block_size != 0) {
      type = GgmlType::kQ8_0;
    } else if (s.default_type != GgmlType::kQ8_0) {
      type = GgmlType::kQ6_K;
    }
  } else if (IsAttentionVLike(category)) {
    if (k_mix && UseMoreBits(s.attention_v_seen, s.attention_v_count)) type = GgmlType::kQ6_K;
    if (s.is_70b && (type == GgmlType::kQ3_K || type == GgmlType::kQ4_K)) type = GgmlType::kQ5_K;
    ++s.attention_v_seen;
  } else if (category == Category::kFfnDown) {
    if (k_mix && UseMoreBits(s.ffn_down_seen, s.layers)) type = GgmlType::kQ6_K;
    ++s.ffn_down_seen;
  }
  // The other categories' rules in llama.cpp concern other file types (q2_K .. q3_K_L, the
  // i-quants), mixture-of-experts models or falcon; none changes these four file types.
  return type;
}

bool IsElementType(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

}  // namespace

std::optional<FileType> ParseFileType(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (FileType t : {FileType::kQ8_0, FileType::kQ4_0, FileType::kQ4_K_M, FileType::kQ5_K_M}) {
    if (lower == FileTypeName(t)) return t;
  }
  return std::nullopt;
}

std::string_view FileTypeName(FileType type) {
  switch (type) {
    case FileType::kQ8_0: return "q8_0";
    case FileType::kQ4_0: return "q4_0";
    case FileType::kQ4_K_M: return "q4_k_m";
    case FileType::kQ5_K_M: return "q5_k_m";
  }
  return "?";
}

uint32_t LlamaFileType(FileType type) {
  switch (type) {
    case FileType::kQ8_0: return 7;     // LLAMA_FTYPE_MOSTLY_Q8_0
    case FileType::kQ4_0: return 2;     // LLAMA_FTYPE_MOSTLY_Q4_0
    case FileType::kQ4_K_M: return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    case FileType::kQ5_K_M: return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
  }
  return 0;
}

GgmlType DefaultTensorType(FileType type) {
  switch (type) {
    case FileType::kQ8_0: return GgmlType::kQ8_0;
    case FileType::kQ4_0: return GgmlType::kQ4_0;
    case FileType::kQ4_K_M: return GgmlType::kQ4_K;
    case FileType::kQ5_K_M: return GgmlType::kQ5_K;
  }
  return GgmlType::kF32;
}

bool AllowsQuantization(std::string_view name, const std::vector<int64_t>& dims) {
  // Only matrices (and stacks of them): at least two dims, counting up to the last one that is > 1.
  int n_dims = 1;
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] > 1) n_dims = static_cast<int>(i) + 1;
  }
  if (n_dims < 2) return false;
  // llama.cpp tests "ends with weight" as name.rfind("weight") == name.size() - 6, which a 5-byte
  // name also passes (npos == 5 - 6 in size_t); kept so that every name gets llama.cpp's answer.
  if (name.rfind("weight") != name.size() - 6) return false;
  for (std::string_view part : kKeptNameParts) {
    if (Contains(name, part)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

GgmlType FallbackType(GgmlType type, int64_t row_length) {
  if (row_length % formats::GgmlTypeInfo(type).block_size == 0) return type;
  GgmlType fallback = type;  // q8_0, q4_0: already 32-blocks, there is nothing smaller
  switch (type) {
    case GgmlType::kQ4_K: fallback = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: fallback = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: fallback = GgmlType::kQ8_0; break;
    default: break;
  }
  return row_length % formats::GgmlTypeInfo(fallback).block_size == 0 ? fallback : GgmlType::kF16;
}

common::StatusOr<std::vector<GgmlType>> PlanTensorTypes(FileType type, const ModelDesc& model,
                                                        const std::vector<SourceTensor>& tensors) {
  const std::string& arch = model.architecture;
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3") {
    return Status::InvalidArgument(fmt::format(
        "architecture \"{}\" is not supported (llama, qwen2 and qwen3 are: llama.cpp's recipe has rules of its own "
        "for some others)",
        arch));
  }
  RecipeState s{type, DefaultTensorType(type)};
  s.layers = model.layers;
  s.is_70b = model.layers == 80 && (arch == "qwen2" || (arch == "llama" && model.heads != model.kv_heads));
  for (const SourceTensor& t : tensors) {
    if (!IsElementType(t.type)) {
      return Status::InvalidArgument(fmt::format("tensor \"{}\" is {}; only f32, f16 and bf16 tensors can be quantized",
                                                 t.name, formats::GgmlTypeName(t.type)));
    }
    const Category c = CategoryOf(t.name);
    if (c == Category::kOutput) s.tied_embeddings = false;
    if (IsAttentionVLike(c)) ++s.attention_v_count;
  }
  // llama.cpp walks the tensors ordered by layer (tensors outside blk.N first), then by name; the
  // per-layer rules count attn_v and ffn_down tensors in that order.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&tensors](size_t a, size_t b) {
    const int64_t la = LayerOf(tensors[a].name), lb = LayerOf(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  std::vector<GgmlType> types(tensors.size());
  for (size_t i : order) {
    const SourceTensor& t = tensors[i];
    types[i] = AllowsQuantization(t.name, t.dims) ? FallbackType(ChooseType(s, t), t.row_length()) : t.type;
  }
  return types;
}

}  // namespace niels::tools::quantize
