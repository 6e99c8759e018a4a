#include "daemon/model/config.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_model.h"

namespace niels::daemon::model {
namespace {

using common::StatusCode;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kValid =
    R"({"V": 400, "T": 64, "C": 32, "L": 2, "H": 4, "d_ff": 64, "rope_theta": 10000.0})";

nlohmann::json ValidJson() { return nlohmann::json::parse(kValid); }

TEST(ConfigTest, ParsesEveryKey) {
  auto c = ParseModelConfig(kValid, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 400);
  EXPECT_EQ(c->context, 64);
  EXPECT_EQ(c->width, 32);
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->heads, 4);
  EXPECT_EQ(c->d_ff, 64);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->head_dim(), 8);
  EXPECT_EQ(c->name, "");
}

TEST(ConfigTest, OptionalNameDropoutAndUnknownKeysAreAccepted) {
  auto j = ValidJson();
  j["name"] = "niels-demo";
  j["dropout"] = 0.1;
  j["some_future_key"] = {{"nested", true}};
  j["rope_theta"] = 500000;  // an integer is a number too
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "niels-demo");
  EXPECT_EQ(c->rope_theta, 500000.0);
}

TEST(ConfigTest, JsonRoundTrip) {
  ModelConfig c;
  c.vocab_size = 123;
  c.context = 77;
  c.width = 48;
  c.layers = 3;
  c.heads = 6;
  c.d_ff = 96;
  c.rope_theta = 2500.5;
  c.name = "x y";
  auto parsed = ParseModelConfig(ModelConfigToJson(c), "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->vocab_size, 123);
  EXPECT_EQ(parsed->context, 77);
  EXPECT_EQ(parsed->width, 48);
  EXPECT_EQ(parsed->layers, 3);
  EXPECT_EQ(parsed->heads, 6);
  EXPECT_EQ(parsed->d_ff, 96);
  EXPECT_EQ(parsed->rope_theta, 2500.5);
  EXPECT_EQ(parsed->name, "x y");
}

// Malformed case: invalid JSON.
TEST(ConfigTest, InvalidJsonNamesTheFile) {
  auto c = ParseModelConfig(R"({"V": 400, "T": )", "/models/x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("/models/x/config.json"), HasSubstr("invalid JSON")));
}

TEST(ConfigTest, NonObjectJsonIsRejected) {
  auto c = ParseModelConfig("[1, 2, 3]", "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("config.json"));
}

// Malformed case: missing config key (each required key in turn).
TEST(ConfigTest, MissingKeyNamesFileAndKey) {
  for (const char* key : {"V", "T", "C", "L", "H", "d_ff", "rope_theta"}) {
    auto j = ValidJson();
    j.erase(key);
    auto c = ParseModelConfig(j.dump(), "config.json");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(c.status().message(),
                AllOf(HasSubstr("config.json"), HasSubstr("missing key \"" + std::string(key) + "\"")));
  }
}

TEST(ConfigTest, NonIntegerOrNonPositiveValueNamesTheKey) {
  const std::vector<std::pair<const char*, nlohmann::json>> cases = {
      {"V", "400"}, {"T", 64.5}, {"C", 0}, {"L", -2}, {"H", nullptr}, {"d_ff", true},
      {"rope_theta", -1.0}, {"rope_theta", "big"}, {"T", 1LL << 40}, {"name", 5}};
  for (const auto& [key, value] : cases) {
    auto j = ValidJson();
    j[key] = value;
    auto c = ParseModelConfig(j.dump(), "config.json");
    ASSERT_FALSE(c.ok()) << key << " = " << value.dump();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(),
                AllOf(HasSubstr("config.json"), HasSubstr(fmt::format("\"{}\"", key))));
  }
}

// Malformed case: C not divisible by H.
TEST(ConfigTest, WidthNotDivisibleByHeads) {
  auto j = ValidJson();
  j["C"] = 30;
  j["H"] = 4;
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("config.json"), HasSubstr("\"C\" (30)"),
                                          HasSubstr("not divisible"), HasSubstr("\"H\" (4)")));
}

// Malformed case: odd head dim.
TEST(ConfigTest, OddHeadDim) {
  auto j = ValidJson();
  j["C"] = 36;  // 36 / 4 = 9
  j["H"] = 4;
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("config.json"), HasSubstr("head dim"), HasSubstr("9"), HasSubstr("odd")));
}

TEST(ConfigTest, LoadReadsFileAndNamesItInErrors) {
  niels::testing::TempDir dir("niels_config_test_");
  const auto path = dir / "config.json";
  niels::testing::WriteFile(path, kValid);
  auto c = LoadModelConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->d_ff, 64);

  niels::testing::WriteFile(path, "{not json");
  c = LoadModelConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(path.string()));
}

TEST(ConfigTest, LoadMissingFileIsNotFound) {
  niels::testing::TempDir dir("niels_config_test_");
  auto c = LoadModelConfig(dir / "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("config.json"));
}

}  // namespace
}  // namespace niels::daemon::model

// Found by fuzz_config: nlohmann throws out_of_range (not parse_error) for a number too large for a
// double, which escaped ParseModelConfig and terminated nielsd.
TEST(ConfigTest, NumberTooLargeForADoubleIsAnErrorNotACrash) {
  for (const char* text : {R"({"T": {"V": 1E86666}})", R"({"V": 8, "rope_theta": -1e999})"}) {
    auto c = niels::daemon::model::ParseModelConfig(text, "config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find("config.json: invalid JSON"), std::string::npos) << c.status().message();
  }
}

// A value nested 200,000 levels deep where an integer belongs: the error message once dumped the
// value recursively and overflowed the stack (SIGSEGV at load). Nesting is now refused while parsing.
TEST(ConfigTest, DeeplyNestedValueIsRefusedWhileParsing) {
  constexpr size_t kDepth = 200'000;
  const std::string deep = std::string(kDepth, '[') + std::string(kDepth, ']');
  auto c = niels::daemon::model::ParseModelConfig(R"({"V": )" + deep + "}", "/models/x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), niels::common::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "/models/x/config.json: nested deeper than 128 levels");
}
