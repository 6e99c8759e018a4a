#include "common/bounded_json.h"

#include <gtest/gtest.h>

#include <string>

namespace niels::common {
namespace {

std::string NestedArrays(size_t depth, std::string_view inner = "") {
  return std::string(depth, '[') + std::string(inner) + std::string(depth, ']');
}

std::string NestedObjects(size_t depth) {
  std::string text;
  for (size_t i = 0; i < depth; ++i) text += R"({"a":)";
  text += "1";
  text += std::string(depth, '}');
  return text;
}

TEST(BoundedJsonTest, ParsesOrdinaryJson) {
  JsonParseFailure failure = JsonParseFailure::kSyntax;
  auto parsed = ParseJsonBounded(R"({"a": [1, 2, {"b": "c"}], "d": null})", "x.json", &failure);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(failure, JsonParseFailure::kNone);
  EXPECT_EQ((*parsed)["a"][2]["b"], "c");
}

TEST(BoundedJsonTest, NestingUpToTheLimitIsAccepted) {
  auto arrays = ParseJsonBounded(NestedArrays(kMaxJsonNesting, "7"), "x.json");
  ASSERT_TRUE(arrays.ok()) << arrays.status().ToString();
  auto objects = ParseJsonBounded(NestedObjects(kMaxJsonNesting), "x.json");
  ASSERT_TRUE(objects.ok()) << objects.status().ToString();
  // Both sorts count: objects inside arrays inside objects.
  auto mixed = ParseJsonBounded(R"({"a": [)" + NestedObjects(kMaxJsonNesting - 2) + "]}", "x.json");
  EXPECT_TRUE(mixed.ok()) << mixed.status().ToString();
}

TEST(BoundedJsonTest, OneLevelPastTheLimitIsRefused) {
  for (const std::string& text : {NestedArrays(kMaxJsonNesting + 1), NestedObjects(kMaxJsonNesting + 1),
                                  R"({"a": [)" + NestedObjects(kMaxJsonNesting - 1) + "]}"}) {
    JsonParseFailure failure = JsonParseFailure::kNone;
    auto parsed = ParseJsonBounded(text, "/m/config.json", &failure);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(failure, JsonParseFailure::kTooDeep);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), "/m/config.json: nested deeper than 128 levels");
  }
}

// 200,000 levels: refused at level 129, before the rest is read (and unterminated input is
// refused the same way, since the limit is hit first).
TEST(BoundedJsonTest, VeryDeepNestingIsRefusedWithoutRecursion) {
  for (const std::string& text : {NestedArrays(200'000), std::string(200'000, '['), NestedObjects(200'000)}) {
    auto parsed = ParseJsonBounded(text, "deep.json");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().message(), "deep.json: nested deeper than 128 levels");
  }
}

TEST(BoundedJsonTest, SyntaxErrorsSayInvalidJson) {
  for (const char* text : {R"({"V": 400, "T": )", "", "[1, 2", R"({"a": 1E86666})"}) {
    JsonParseFailure failure = JsonParseFailure::kNone;
    auto parsed = ParseJsonBounded(text, "x.json", &failure);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(failure, JsonParseFailure::kSyntax) << text;
    EXPECT_EQ(parsed.status().message().rfind("x.json: invalid JSON: ", 0), 0u) << parsed.status().message();
  }
}

TEST(BoundedJsonTest, ExcerptOfASmallValueIsItsDump) {
  const nlohmann::json value = nlohmann::json::parse(R"({"a": [1, 2.5, true, null], "b": "x\"y"})");
  EXPECT_EQ(JsonExcerpt(value), value.dump());
  EXPECT_EQ(JsonExcerpt(nlohmann::json::array()), "[]");
  EXPECT_EQ(JsonExcerpt(nlohmann::json::object()), "{}");
  EXPECT_EQ(JsonExcerpt(nlohmann::json(42)), "42");
  EXPECT_EQ(JsonExcerpt(nlohmann::json("s")), "\"s\"");
}

TEST(BoundedJsonTest, ExcerptOfALargeValueIsCut) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100'000; ++i) big.push_back(i);
  const std::string excerpt = JsonExcerpt(big, 20);
  EXPECT_EQ(excerpt, "[0,1,2,3,4,5,6,7,...");
  const std::string long_string = JsonExcerpt(nlohmann::json(std::string(1 << 20, 'x')), 10);
  EXPECT_EQ(long_string, "\"xxxxxx...");
  nlohmann::json long_key = nlohmann::json::object();
  long_key[std::string(1 << 20, 'k')] = 1;
  EXPECT_EQ(JsonExcerpt(long_key, 8), "{\"kkk...");
}

// A value far deeper than ParseJsonBounded allows (built in code) is excerpted without recursing.
TEST(BoundedJsonTest, ExcerptOfADeepValueDoesNotRecurse) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 200'000; ++i) {
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(JsonExcerpt(deep, 12), "[[[[[[[[[...");
}

TEST(BoundedJsonTest, ExcerptNeverSplitsAUtf8Sequence) {
  // "é" is two bytes: a cut 6 bytes in (the quote, é, é and a half) would land inside one.
  const std::string excerpt = JsonExcerpt(nlohmann::json(std::string(100, 'a') + std::string(50, 'x')), 8);
  EXPECT_EQ(excerpt, "\"aaaa...");
  const std::string accents = JsonExcerpt(nlohmann::json("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"), 9);
  EXPECT_EQ(accents, "\"\xc3\xa9\xc3\xa9...");
  const std::string invalid = JsonExcerpt(nlohmann::json(std::string("a\xff")), 80);
  EXPECT_EQ(invalid, "\"a\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace niels::common
