// WeightStats through the Service: the statistics of the tensors the names select (by Hugging Face
// and GGUF names, globs), equal to the statistics code on the model's own tensors; computed on the
// compile worker while the engine thread keeps answering; cached; every bad input INVALID_ARGUMENT
// naming its field and budget.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/budgets.h"
#include "daemon/model/tensor_statistics.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace weight_stats_test {  // this file's own names: the suite compiles as one unity unit

constexpr int64_t kContext = 128;

v1::Request WeightStats(const std::vector<std::string>& names, bool full) {
  v1::Request request;
  auto* stats = request.mutable_weight_stats();
  for (const std::string& name : names) stats->add_names(name);
  stats->set_full(full);
  return request;
}

void ExpectRefused(Service& service, const v1::Request& request, const std::string& field, const std::string& budget) {
  const v1::Response response = Call(service, request);
  ASSERT_EQ(ErrorOf(response), v1::INVALID_ARGUMENT) << response.DebugString();
  EXPECT_NE(response.error().message().find(field), std::string::npos) << response.error().message();
  if (!budget.empty()) {
    EXPECT_NE(response.error().message().find("(budget " + budget + ")"), std::string::npos)
        << response.error().message();
  }
}

TEST(WeightStatsTest, TheSelectedTensorsStatisticsEqualTheStatisticsOfTheModelsTensors) {
  auto service = StartEngine(kContext);
  const auto model = LoadTinyModel(kContext);
  const model::Weights& weights = model->transformer->weights();
  for (bool full : {false, true}) {
    const v1::Response response =
        Call(*service, WeightStats({"model.layers.*.mlp.down_proj.weight", "blk.0.ffn_gate.weight"}, full));
    ASSERT_TRUE(response.has_weight_stats()) << response.DebugString();
    const auto& tensors = response.weight_stats().tensors();
    ASSERT_EQ(tensors.size(), 3);  // in the model's order: layer 0's gate, then down; layer 1's down
    EXPECT_EQ(tensors[0].hf_name(), "model.layers.0.mlp.gate_proj.weight");
    EXPECT_EQ(tensors[0].gguf_name(), "blk.0.ffn_gate.weight");
    EXPECT_EQ(tensors[1].hf_name(), "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(tensors[2].gguf_name(), "blk.1.ffn_down.weight");
    const model::Tensor* want_tensors[] = {&weights.blocks[0].w_gate, &weights.blocks[0].w_down,
                                           &weights.blocks[1].w_down};
    for (int i = 0; i < 3; ++i) {
      const v1::TensorStats& got = tensors[i];
      const model::Tensor& tensor = *want_tensors[i];
      const model::TensorStatistics want = model::ComputeStatistics(tensor.ToFloats(), full);
      EXPECT_EQ(std::vector<int64_t>(got.shape().begin(), got.shape().end()), tensor.shape);
      EXPECT_EQ(got.dtype(), "f32");
      EXPECT_EQ(got.parameters(), static_cast<uint64_t>(tensor.numel()));
      EXPECT_EQ(got.mean(), want.mean);
      EXPECT_EQ(got.std(), want.std);
      EXPECT_EQ(got.min(), want.min);
      EXPECT_EQ(got.max(), want.max);
      EXPECT_EQ(got.l2_norm(), want.l2_norm);
      EXPECT_EQ(got.full(), full);
      if (!full) {
        EXPECT_FALSE(got.has_histogram());
        continue;
      }
      EXPECT_EQ(got.median(), want.median);
      EXPECT_EQ(got.p5(), want.percentiles[0]);
      EXPECT_EQ(got.p95(), want.percentiles[4]);
      EXPECT_EQ(got.l1_norm(), want.l1_norm);
      ASSERT_EQ(got.histogram().counts_size(), model::kHistogramBins);
      for (int b = 0; b < model::kHistogramBins; ++b) {
        EXPECT_EQ(got.histogram().counts(b), static_cast<uint64_t>(want.histogram[b]));
      }
    }
  }
}

TEST(WeightStatsTest, ComputedOnceThenServedFromTheCache) {
  auto service = StartEngine(kContext);
  EXPECT_EQ(service->weight_stats_cache().size(), 0u);
  const v1::Response first = Call(*service, WeightStats({"*"}, true));
  ASSERT_TRUE(first.has_weight_stats()) << first.DebugString();
  const size_t tensors = static_cast<size_t>(first.weight_stats().tensors_size());
  // niels_gpt: embedding, 10 per layer (fused qkv, proj, 2 norms, 3 matrices, 3 biases), final norm.
  EXPECT_EQ(tensors, 2u + 10u * 2u);
  EXPECT_EQ(service->weight_stats_cache().size(), tensors);
  // Compact answers come from the full entries; nothing new is computed or kept.
  const v1::Response compact = Call(*service, WeightStats({"*"}, false));
  ASSERT_TRUE(compact.has_weight_stats());
  EXPECT_EQ(service->weight_stats_cache().size(), tensors);
  const v1::Response again = Call(*service, WeightStats({"*"}, true));
  EXPECT_TRUE(again.weight_stats().SerializeAsString() == first.weight_stats().SerializeAsString());
  for (int i = 0; i < compact.weight_stats().tensors_size(); ++i) {
    EXPECT_EQ(compact.weight_stats().tensors(i).std(), first.weight_stats().tensors(i).std());
    EXPECT_FALSE(compact.weight_stats().tensors(i).full());
  }
  // The fused qkv under its checkpoint name.
  EXPECT_EQ(first.weight_stats().tensors(2).hf_name(), "blocks.0.attn.qkv.weight");
}

TEST(WeightStatsTest, RunsOnTheCompileWorkerWhileTheEngineKeepsAnswering) {
  std::mutex mutex;
  std::condition_variable cv;
  bool started = false, released = false;
  std::thread::id worker;
  ServiceOptions options;
  options.on_compile_start = [&](const server::Job&) {
    std::unique_lock lock(mutex);
    started = true;
    worker = std::this_thread::get_id();
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  auto service = StartEngine(kContext, {}, std::move(options));
  auto held = SubmitAsync(*service, WeightStats({"*"}, true));
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return started; }));
  }
  // The statistics are held on the worker: the engine answers other requests and generates.
  v1::Request info;
  info.mutable_info();
  EXPECT_TRUE(Call(*service, info).has_info());
  const v1::Response created = Call(*service, CreateRequest());
  ASSERT_TRUE(created.has_create_session());
  EXPECT_TRUE(Call(*service, ChatRequest(created.create_session().session_id(), "hello", 3)).has_chat());
  EXPECT_EQ(held->finals(), 0);
  EXPECT_NE(worker, std::this_thread::get_id());
  {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
  EXPECT_TRUE(held->Wait().has_weight_stats());
}

TEST(WeightStatsTest, ACancelledRequestIsAnsweredCancelled) {
  auto service = StartEngine(kContext);
  auto cancel = std::make_shared<std::atomic<bool>>(true);
  const v1::Response response = SubmitAsync(*service, WeightStats({"*"}, true), kUid, cancel)->Wait();
  EXPECT_EQ(ErrorOf(response), v1::CANCELLED) << response.DebugString();
}

TEST(WeightStatsTest, BadNamesAreInvalidArgumentNamingTheField) {
  auto service = StartEngine(kContext);
  ExpectRefused(*service, WeightStats({}, false), "weight_stats.names", "");
  ExpectRefused(*service, WeightStats({"model.layers.0.mlp.gate_proj.weight", "model.layers.9.*"}, false),
                "weight_stats.names[1]: 'model.layers.9.*' names no tensor", "");
  ExpectRefused(*service, WeightStats({"lm_head.weight"}, false), "weight_stats.names[0]", "");  // tied
  const uint64_t names_before = common::Refusals(common::BudgetId::kWeightStatsNames);
  ExpectRefused(*service, WeightStats(std::vector<std::string>(common::kWeightStatsNamesLimit + 1, "*"), false),
                "weight_stats.names: 17 names (the limit is 16)", "weight_stats_names");
  EXPECT_EQ(common::Refusals(common::BudgetId::kWeightStatsNames), names_before + 1);
  // At the limits it is served.
  EXPECT_TRUE(Call(*service, WeightStats(std::vector<std::string>(common::kWeightStatsNamesLimit, "*"), false))
                  .has_weight_stats());
  std::string long_name(common::kWeightStatsNameBytesLimit, '*');
  EXPECT_TRUE(Call(*service, WeightStats({long_name}, false)).has_weight_stats());
  ExpectRefused(*service, WeightStats({"*", long_name + "*"}, false), "weight_stats.names[1]: 129 bytes",
                "weight_stats_name_bytes");
}

TEST(WeightStatsTest, TheSelectionIsBoundedInTensorsAndElements) {
  EXPECT_TRUE(CheckWeightStatsSelection(common::kWeightStatsTensorsLimit, common::kWeightStatsElementsLimit).ok());
  const common::Status tensors = CheckWeightStatsSelection(common::kWeightStatsTensorsLimit + 1, 1);
  EXPECT_EQ(tensors.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(tensors.message().find("weight_stats.names: the names match 1025 tensors (the limit is 1024)"),
            std::string::npos)
      << tensors.message();
  EXPECT_NE(tensors.message().find("(budget weight_stats_tensors)"), std::string::npos);
  const common::Status elements = CheckWeightStatsSelection(3, common::kWeightStatsElementsLimit + 1);
  EXPECT_EQ(elements.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(elements.message().find("(budget weight_stats_elements)"), std::string::npos) << elements.message();
}

TEST(WeightStatsTest, AModelWithMoreTensorsThanTheLimitIsAnsweredInParts) {
  // 110 layers of 10 tensors: "*" selects 1102 tensors, over the 1024 of one request.
  niels::testing::TempDir dir("niels_weight_stats_");
  model::ModelConfig config = niels::testing::TinyConfig();
  config.layers = 110;
  config.width = 8;
  config.heads = 2;
  config.d_ff = 8;
  config.context = 32;
  niels::testing::WriteModelDir(dir.path(), config, /*seed=*/3);
  auto made = MakeService(dir.path(), {});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Service& service = **made;
  ExpectRefused(service, WeightStats({"*"}, false), "the names match 1102 tensors", "weight_stats_tensors");
  // Layers 1, 10-19 and 100-109, 9 tensors each under Hugging Face names (the fused qkv has none).
  const v1::Response part = Call(service, WeightStats({"model.layers.1*"}, false));
  ASSERT_TRUE(part.has_weight_stats()) << part.DebugString();
  EXPECT_EQ(part.weight_stats().tensors_size(), 21 * 9);
}

}  // namespace weight_stats_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
