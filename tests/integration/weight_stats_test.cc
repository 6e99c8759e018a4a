// Weight statistics from a real nielsd over its socket: through the C++ client, and through the
// Python client against numpy on the model file read independently (weight_stats_reference.py,
// which also checks niels-inspect --weight-stats): the random niels_gpt model directory (f32, and
// served as bf16 with --dtype), a random Qwen3 Hugging Face directory (bf16; Qwen3's 151936-row
// embedding, 9.7 M values, so chunk boundaries and large counts are crossed), and a random Llama
// GGUF with q8_0 and q4_0 matrices against its dequantized values.
#include <iostream>
#include <string>
#include <vector>

#include "daemon/kernels/dtype.h"
#include "tests/integration/integration_fixture.h"
#include "tests/support/family_model.h"

namespace niels::integration {
namespace {

class WeightStatsTest : public IntegrationTest {
 protected:
  // Runs the reference script on the running daemon; its report goes into the test's output.
  void CheckAgainstNumpy(const std::filesystem::path& file, const std::string& format,
                         const std::filesystem::path& model, const std::string& served_dtype = "") {
    std::vector<std::string> argv = {
        "/usr/bin/python3", std::string(NIELS_SOURCE_DIR) + "/tests/integration/weight_stats_reference.py",
        "--socket", socket_path().string(), "--file", file.string(), "--format", format, "--inspect",
        NIELS_INSPECT_BINARY, "--model", model.string(), "--tools-dir", std::string(NIELS_SOURCE_DIR) + "/tests/tools"};
    if (!served_dtype.empty()) {
      argv.push_back("--served-dtype");
      argv.push_back(served_dtype);
    }
    auto result = testing::RunProcess(argv, "", {{"PYTHONPATH", NIELS_PYTHON_PACKAGE_DIR}});
    EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
    EXPECT_NE(result.out.find(" 0 failures"), std::string::npos) << result.out << result.err;
    std::cout << result.out;  // "checked N tensors of FILE: 0 failures"
  }
};

TEST_F(WeightStatsTest, NielsModelOverTheSocketEqualsNumpy) {
  StartDaemon();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto stats = client->WeightStats({"model.layers.*.mlp.down_proj.weight", "blocks.0.attn.qkv.weight"}, true);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->tensors_size(), 3);
  EXPECT_EQ(stats->tensors(0).hf_name(), "blocks.0.attn.qkv.weight");
  EXPECT_EQ(stats->tensors(0).shape(0), 3 * IntegrationConfig().width);
  EXPECT_EQ(stats->tensors(1).gguf_name(), "blk.0.ffn_down.weight");
  EXPECT_EQ(stats->tensors(2).histogram().counts_size(), 20);
  auto refused = client->WeightStats({"model.layers.0.mlp.gate_proj.weight", "nope"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("weight_stats.names[1]"), std::string::npos)
      << refused.status().message();
  CheckAgainstNumpy(model_dir() / "model.safetensors", "niels", model_dir());
}

TEST_F(WeightStatsTest, AModelServedAsBf16IsReportedAsServed) {
  testing::DaemonProcessOptions options = DaemonOptions();
  options.extra_args.push_back("--dtype");
  options.extra_args.push_back("bf16");
  daemon_ = testing::DaemonProcess::Start(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto stats = client->WeightStats({"model.layers.0.mlp.up_proj.*"});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->tensors_size(), 2);
  EXPECT_EQ(stats->tensors(0).dtype(), "bf16");  // the matrix as converted at load
  EXPECT_EQ(stats->tensors(1).dtype(), "f32");   // its bias: 1-D tensors stay f32
  CheckAgainstNumpy(model_dir() / "model.safetensors", "niels", model_dir(), "bf16");
}

TEST_F(WeightStatsTest, HuggingFaceQwen3DirectoryInBf16EqualsNumpy) {
  daemon::model::ModelConfig config = testing::TinyFamilyConfig(daemon::model::Architecture::kQwen3);
  config.vocab_size = 151936;  // Qwen3's embedding rows (past the tiny tokenizer: padding, as Qwen pads)
  const daemon::model::Weights weights = testing::TinyFamilyWeights(config, 13);
  const std::filesystem::path hf = dir_.path() / "qwen3";
  testing::MakeHfModel(config, weights, daemon::kernels::Dtype::kBF16).Write(hf);
  testing::DaemonProcessOptions options = DaemonOptions();
  options.model_dir = hf;
  daemon_ = testing::DaemonProcess::Start(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto stats = client->WeightStats({"*.self_attn.*_norm.weight"}, true);  // Qwen3's q/k norms
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->tensors_size(), 2 * config.layers);
  CheckAgainstNumpy(hf / "model.safetensors", "hf", hf);
}

TEST_F(WeightStatsTest, QuantizedGgufEqualsNumpyOnItsDequantizedValues) {
  using daemon::kernels::Dtype;
  const daemon::model::ModelConfig config = testing::TinyFamilyConfig(daemon::model::Architecture::kLlama);
  const daemon::model::Weights weights = testing::TinyFamilyWeights(config, 21);
  // q8_0 matrices, the MLP's down and up projections q4_0.
  const auto files = testing::MakeGgufModel(config, weights, Dtype::kQ8_0, [](const std::string& name) {
    return name.find("ffn_down") != std::string::npos || name.find("ffn_up") != std::string::npos
               ? std::optional<Dtype>(Dtype::kQ4_0)
               : std::nullopt;
  });
  const std::filesystem::path gguf = dir_.path() / "model.gguf";
  files.Write(gguf);
  testing::DaemonProcessOptions options = DaemonOptions();
  options.model_dir = gguf;
  daemon_ = testing::DaemonProcess::Start(options);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto stats = client->WeightStats({"blk.0.ffn_down.weight", "blk.0.attn_q.weight"});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->tensors_size(), 2);
  EXPECT_EQ(stats->tensors(0).dtype(), "q8_0");  // attn_q comes first in the model's order
  EXPECT_EQ(stats->tensors(1).dtype(), "q4_0");
  CheckAgainstNumpy(gguf, "gguf", gguf);
}

}  // namespace
}  // namespace niels::integration
