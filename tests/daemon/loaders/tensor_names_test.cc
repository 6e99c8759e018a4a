// The one name table (tensor_slots.h) and the names weight statistics select by (tensor_names.h):
// every slot's Hugging Face, GGUF and niels_gpt name written out by hand, `*` matching within and
// across dots, each tensor selected once in the model's order, a pattern matching nothing named.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/loaders/tensor_names.h"
#include "common/name_glob.h"
#include "daemon/loaders/tensor_slots.h"
#include "tests/support/family_model.h"
#include "tests/support/test_model.h"

namespace niels::daemon::loaders {
namespace {
namespace tensor_names_test {  // this file's own names: the suite compiles as one unity unit

TEST(TensorNamesTest, EverySlotHasTheNamesOfEachFormat) {
  struct Case {
    const char* ours;
    const char* hf;
    const char* gguf;
    const char* niels;
  };
  const Case cases[] = {
      {"tok_emb", "model.embed_tokens.weight", "token_embd.weight", "tok_emb.weight"},
      {"final_norm", "model.norm.weight", "output_norm.weight", "ln_f.weight"},
      {"lm_head", "lm_head.weight", "output.weight", ""},
      {"rope_freqs", "", "rope_freqs.weight", ""},
      {"blocks.0.attn_norm", "model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", "blocks.0.ln1.weight"},
      {"blocks.11.wqkv", "", "", "blocks.11.attn.qkv.weight"},
      {"blocks.3.wq", "model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight", ""},
      {"blocks.3.wk", "model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight", ""},
      {"blocks.3.wv", "model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight", ""},
      {"blocks.3.bq", "model.layers.3.self_attn.q_proj.bias", "blk.3.attn_q.bias", ""},
      {"blocks.3.q_norm", "model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight", ""},
      {"blocks.3.k_norm", "model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight", ""},
      {"blocks.3.wo", "model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight", "blocks.3.attn.proj.weight"},
      {"blocks.3.ffn_norm", "model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight",
       "blocks.3.ln2.weight"},
      {"blocks.0.w_gate", "model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", "blocks.0.mlp.fc_g.weight"},
      {"blocks.0.w_up", "model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", "blocks.0.mlp.fc_a.weight"},
      {"blocks.0.w_down", "model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", "blocks.0.mlp.fc_out.weight"},
      {"blocks.0.b_down", "model.layers.0.mlp.down_proj.bias", "blk.0.ffn_down.bias", "blocks.0.mlp.fc_out.bias"},
      {"blocks.x.wq", "", "", ""},
      {"blocks.0.nothing", "", "", ""},
      {"nothing", "", "", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FileName(c.ours, TensorNaming::kHuggingFace), c.hf) << c.ours;
    EXPECT_EQ(FileName(c.ours, TensorNaming::kGguf), c.gguf) << c.ours;
    EXPECT_EQ(FileName(c.ours, TensorNaming::kNiels), c.niels) << c.ours;
  }
}

TEST(TensorNamesTest, FindSlotFindsEverySlotByItsName) {
  model::Weights weights = model::RandomWeights(niels::testing::TinyConfig(), 2, 0.02, /*fused_qkv=*/true);
  weights.ForEach([&](const std::string& name, const model::Tensor& tensor) {
    const model::Tensor* slot = FindSlot(weights, name);
    ASSERT_NE(slot, nullptr) << name;
    EXPECT_EQ(slot->data, tensor.data) << name;
  });
  EXPECT_EQ(FindSlot(weights, "blocks.1.w_down"), &weights.blocks[1].w_down);
  EXPECT_EQ(FindSlot(weights, "blocks.2.w_down"), nullptr);  // the tiny model has 2 layers
  EXPECT_EQ(FindSlot(weights, "blocks.99999999999999999999.w_down"), nullptr);
  EXPECT_EQ(FindSlot(weights, "blocks..w_down"), nullptr);
  EXPECT_EQ(FindSlot(weights, "blocks.0.nothing"), nullptr);
  EXPECT_EQ(FindSlot(weights, "nothing"), nullptr);
}

TEST(TensorNamesTest, NielsNamesAreInTheStateDictOrder) {
  const auto names = NielsTensorNames(1);
  const std::vector<std::string> want = {"tok_emb.weight",    "blocks.0.ln1.weight",       "blocks.0.attn.qkv.weight",
                                         "blocks.0.attn.proj.weight", "blocks.0.ln2.weight", "blocks.0.mlp.fc_a.weight",
                                         "blocks.0.mlp.fc_a.bias",    "blocks.0.mlp.fc_g.weight", "blocks.0.mlp.fc_g.bias",
                                         "blocks.0.mlp.fc_out.weight", "blocks.0.mlp.fc_out.bias", "ln_f.weight"};
  ASSERT_EQ(names.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(names[i].second, want[i]);
  EXPECT_EQ(names[2].first, "blocks.0.wqkv");
}

TEST(TensorNamesTest, StarMatchesAnyRunOfCharactersDotsIncluded) {
  struct Case {
    const char* pattern;
    const char* name;
    bool matches;
  };
  const Case cases[] = {
      {"model.layers.*.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.weight", true},
      {"model.layers.*.mlp.down_proj.weight", "model.layers.27.mlp.down_proj.weight", true},
      {"model.layers.*.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight", false},
      {"model.layers.0.*", "model.layers.0.self_attn.q_proj.weight", true},
      {"model.layers.0.*", "model.layers.10.self_attn.q_proj.weight", false},
      {"blk.1*", "blk.10.ffn_up.weight", true},
      {"blk.1*", "blk.1.ffn_up.weight", true},
      {"*", "anything", true},
      {"*", "", true},
      {"", "", true},
      {"", "a", false},
      {"*.weight", "token_embd.weight", true},
      {"*.bias", "token_embd.weight", false},
      {"*a*b*c", "xxaxxbxxc", true},
      {"*a*b*c", "xxaxxcxxb", false},
      {"a**b", "ab", true},
      {"?", "a", false},  // only * is special
      {"blk.[0].x", "blk.[0].x", true},
      {"token_embd.weight", "token_embd.weight", true},
      {"token_embd.weight", "token_embd.weights", false},
      {"token_embd.weight*", "token_embd.weights", true},
  };
  for (const Case& c : cases) EXPECT_EQ(common::NameGlobMatches(c.pattern, c.name), c.matches) << c.pattern << " ~ " << c.name;
}

TEST(TensorNamesTest, ATensorIsNamedByBothFormatsAndSelectedOnceInTheModelsOrder) {
  const model::ModelConfig config = niels::testing::TinyFamilyConfig(model::Architecture::kQwen3);
  const model::Weights weights = niels::testing::TinyFamilyWeights(config, 3);
  const std::vector<NamedTensor> tensors = NamedTensors(weights);
  ASSERT_FALSE(tensors.empty());
  EXPECT_EQ(tensors.front().hf, "model.embed_tokens.weight");
  EXPECT_EQ(tensors.front().gguf, "token_embd.weight");
  // Both names of one tensor, and a pattern over both formats: each tensor once, in order.
  auto selected = SelectTensors(tensors,
                                {"blk.1.ffn_gate.weight", "model.layers.*.mlp.gate_proj.weight",
                                 "model.layers.0.mlp.gate_proj.weight"},
                                "names");
  ASSERT_TRUE(selected.ok()) << selected.status().ToString();
  ASSERT_EQ(selected->size(), 2u);
  EXPECT_EQ(tensors[(*selected)[0]].gguf, "blk.0.ffn_gate.weight");
  EXPECT_EQ(tensors[(*selected)[1]].hf, "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(tensors[(*selected)[1]].ours, "blocks.1.w_gate");
  auto all = SelectTensors(tensors, {"*"}, "names");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), tensors.size());
  // Qwen3's q/k norms.
  auto norms = SelectTensors(tensors, {"blk.*.attn_?_norm.weight", "*.self_attn.*_norm.weight"}, "names");
  EXPECT_FALSE(norms.ok());  // '?' is literal: the first pattern matches nothing
  EXPECT_NE(norms.status().message().find("names[0]"), std::string::npos) << norms.status().message();
  norms = SelectTensors(tensors, {"*.self_attn.*_norm.weight"}, "names");
  ASSERT_TRUE(norms.ok());
  EXPECT_EQ(norms->size(), 2u * static_cast<size_t>(config.layers));
}

TEST(TensorNamesTest, NielsGptsFusedQkvIsNamedAsInItsCheckpoint) {
  const model::ModelConfig config = niels::testing::TinyConfig();
  const model::Weights weights = model::RandomWeights(config, 5, 0.02, /*fused_qkv=*/true);
  const std::vector<NamedTensor> tensors = NamedTensors(weights);
  auto qkv = SelectTensors(tensors, {"blocks.*.attn.qkv.weight"}, "names");
  ASSERT_TRUE(qkv.ok()) << qkv.status().ToString();
  ASSERT_EQ(qkv->size(), static_cast<size_t>(config.layers));
  EXPECT_EQ(tensors[(*qkv)[1]].hf, "blocks.1.attn.qkv.weight");
  EXPECT_EQ(tensors[(*qkv)[1]].gguf, "blocks.1.attn.qkv.weight");
  EXPECT_EQ(tensors[(*qkv)[1]].ours, "blocks.1.wqkv");
  EXPECT_EQ(tensors[(*qkv)[1]].tensor.shape, (std::vector<int64_t>{3 * config.width, config.width}));
  // Its MLP under the Hugging Face names; a tied head has no entry of its own.
  EXPECT_TRUE(SelectTensors(tensors, {"model.layers.0.mlp.gate_proj.weight"}, "names").ok());
  auto head = SelectTensors(tensors, {"lm_head.weight"}, "weight_stats.names");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(head.status().message().find("weight_stats.names[0]: 'lm_head.weight' names no tensor"),
            std::string::npos)
      << head.status().message();
  // No tensor appears twice and every tensor has both names.
  for (const NamedTensor& t : tensors) {
    EXPECT_FALSE(t.hf.empty()) << t.ours;
    EXPECT_FALSE(t.gguf.empty()) << t.ours;
  }
}

}  // namespace tensor_names_test
}  // namespace
}  // namespace niels::daemon::loaders
