// Structured output, sampled: 600+ constrained Chat replies at temperature 1.0 (top-k off, a seed
// each) through the Service, on a random-weight model (tests/support, the tiny shape with a 1024
// context) and on the shipped demo model, for 22 JSON Schemas, the "any JSON" grammar and llama.cpp's
// eight grammars (node-llama-cpp's copies, scripts/install_references.sh). Every reply that ended
// complete (EOT, or MAX_TOKENS on a complete text) is checked by an independent reference: JSON
// replies with Debian's python3-jsonschema against their schema (tests/daemon/grammar/validate_json.py;
// "any JSON" with json.loads), GBNF replies with the test-only Earley recognizer
// (tests/daemon/grammar/gbnf_reference.py); the replies cut by max_new_tokens (CONSTRAINT_INCOMPLETE)
// are counted, and the first two per grammar must be prefixes of a sentence (Earley). The figures
// are printed.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/handlers/service_fixture.h"

namespace niels::daemon::handlers::testing {
namespace {
namespace constraint_validity_test {  // this file's own names: the suite compiles as one unity unit

const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"]})",
    R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"number"}}})",
    R"({"type":"array","items":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3},"maxItems":4})",
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue",null,3]},"v":{"const":{"k":[1,"x"]}}},"required":["color","v"]})",
    R"({"anyOf":[{"type":"string","maxLength":5},{"type":"number"},{"type":"null"}]})",
    R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["value"]}},"$ref":"#/$defs/node"})",
    R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})",
    R"({"type":"string","minLength":3,"maxLength":6})",
    R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"time"},"dt":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"}},"required":["d","t","dt","id"]})",
    R"({"type":"object","properties":{"known":{"type":"integer"}},"required":["known"],"additionalProperties":true})",
    R"({"type":"object","properties":{"x":{"type":"string","maxLength":8}},"additionalProperties":{"type":"number"}})",
    R"({"type":["string","null"],"maxLength":4})",
    R"({"type":"array","prefixItems":[{"type":"string","maxLength":6},{"type":"integer"},{"type":"boolean"}],"items":false})",
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"n":{"type":"integer"}},"required":["kind","n"]},{"type":"object","properties":{"kind":{"const":"b"},"s":{"type":"string","maxLength":10}},"required":["kind"]}]})",
    R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"$ref":"#/definitions/B"}],"definitions":{"B":{"properties":{"b":{"type":"string","maxLength":10}},"required":["b"]}}})",
    R"({"type":"object","properties":{"t":{"type":"integer","minimum":-50,"maximum":50},"u":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":1000},"v":{"type":"integer","minimum":-7}},"required":["t","u","v"]})",
    R"({"type":"boolean"})",
    R"({"enum":["a\"b","tab\t","\u00fc","back\\slash","\u4e2d\u6587"]})",
    R"({"type":"string","pattern":"^(cat|dog)s?( [0-9]+)?$"})",
    R"({"type":"array","items":{"enum":["x","y"]},"minItems":2,"maxItems":2})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"score":{"type":"number"},"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}},"required":["id"]},"minItems":1,"maxItems":3})",
    R"({"type":"object","properties":{"ok":{"type":"boolean"},"count":{"type":"integer","minimum":0,"maximum":9}},"required":["ok","count"],"additionalProperties":false})",
};
const std::vector<std::string> kLlamaGrammars = {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr",
                                                 "list"};

struct Family {
  std::string name;
  v1::Constraint constraint;
  nlohmann::json schema;  // JSON families: the schema, or null for any JSON
  bool json = false;
};

std::vector<Family> Families() {
  std::vector<Family> out;
  for (size_t i = 0; i < kSchemas.size(); ++i) {
    Family f{"schema " + std::to_string(i), {}, nlohmann::json::parse(kSchemas[i]), true};
    f.constraint.set_json_schema(kSchemas[i]);
    out.push_back(std::move(f));
  }
  Family any{"any JSON", {}, nullptr, true};
  any.constraint.mutable_any_json();
  out.push_back(std::move(any));
  for (const std::string& name : kLlamaGrammars) {
    Family f{name + ".gbnf", {}, nullptr, false};
    f.constraint.set_gbnf(grammar::testing::ReadFile(grammar::testing::LlamaGrammarDir() / (name + ".gbnf")));
    EXPECT_FALSE(f.constraint.gbnf().empty()) << name << ": " << grammar::testing::kMissingReferences;
    out.push_back(std::move(f));
  }
  return out;
}

struct Sample {
  size_t family;
  v1::StopReason stop;
  std::string reply;
};

// kSeeds constrained replies per family on `engine`, the seeds' requests running at once.
// JSON families get up to `max_new_tokens`, GBNF families up to `gbnf_max_new_tokens` (the Earley
// reference in Python is slow on long strings).
std::vector<Sample> SampleReplies(Service& engine, const std::vector<Family>& families, int seeds, int max_new_tokens,
                                  int gbnf_max_new_tokens) {
  std::vector<Sample> out;
  for (size_t f = 0; f < families.size(); ++f) {
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    std::vector<std::string> sessions;
    for (int seed = 1; seed <= seeds; ++seed) {
      sessions.push_back(Call(engine, CreateRequest()).create_session().session_id());
      v1::Request r = ChatRequest(sessions.back(), "give me the answer as asked",
                                  families[f].json ? max_new_tokens : gbnf_max_new_tokens);
      *r.mutable_chat()->mutable_constraint() = families[f].constraint;
      r.mutable_chat()->mutable_sampling()->set_temperature(1.0f);
      r.mutable_chat()->mutable_sampling()->set_top_k(0);
      r.mutable_chat()->mutable_sampling()->set_seed(static_cast<uint64_t>(1000 * f + seed));
      sinks.push_back(SubmitAsync(engine, r));
    }
    for (auto& sink : sinks) {
      const v1::Response response = sink->Wait();
      EXPECT_TRUE(response.has_chat()) << families[f].name << ": " << response.DebugString();
      if (response.has_chat()) out.push_back({f, response.chat().stop_reason(), response.chat().reply()});
    }
    for (const std::string& id : sessions) {
      v1::Request remove;
      remove.mutable_delete_session()->set_session_id(id);
      EXPECT_TRUE(Call(engine, remove).has_delete_session());
    }
  }
  return out;
}

struct Tally {
  int total = 0, complete = 0, valid = 0, incomplete = 0, incomplete_prefix = 0;
};

// Checks every sample with the references; returns the tally per family kind ("json", "gbnf").
std::map<std::string, Tally> Validate(const std::vector<Family>& families, const std::vector<Sample>& samples,
                                      const std::string& model) {
  std::map<std::string, Tally> tally;
  nlohmann::json json_cases = nlohmann::json::array();
  std::vector<std::vector<const Sample*>> json_samples;
  for (size_t f = 0; f < families.size(); ++f) {
    std::vector<const Sample*> complete, incomplete;
    for (const Sample& s : samples) {
      if (s.family != f) continue;
      Tally& t = tally[families[f].json ? "json" : "gbnf"];
      ++t.total;
      EXPECT_TRUE(s.stop == v1::EOT || s.stop == v1::MAX_TOKENS || s.stop == v1::CONSTRAINT_INCOMPLETE)
          << v1::StopReason_Name(s.stop);
      (s.stop == v1::CONSTRAINT_INCOMPLETE ? incomplete : complete).push_back(&s);
    }
    Tally& t = tally[families[f].json ? "json" : "gbnf"];
    t.complete += static_cast<int>(complete.size());
    t.incomplete += static_cast<int>(incomplete.size());
    if (families[f].json) {
      nlohmann::json instances = nlohmann::json::array();
      for (const Sample* s : complete) instances.push_back(s->reply);
      json_cases.push_back({{"schema", families[f].schema}, {"instances", instances}});
      json_samples.push_back(complete);
      continue;
    }
    // GBNF: the Earley recognizer, complete replies as sentences, (the first two) cut ones as prefixes.
    nlohmann::json strings = nlohmann::json::array();
    for (const Sample* s : complete) strings.push_back(s->reply);
    for (size_t i = 0; i < incomplete.size() && i < 2; ++i) strings.push_back(incomplete[i]->reply);
    const nlohmann::json verdicts = grammar::testing::RunPython(
        "gbnf_reference.py", {{"grammar", families[f].constraint.gbnf()}, {"strings", strings}});
    EXPECT_EQ(verdicts.size(), strings.size());
    for (size_t i = 0; i < strings.size() && i < verdicts.size(); ++i) {
      if (i < complete.size()) {
        EXPECT_TRUE(verdicts[i]["full"].get<bool>()) << model << " " << families[f].name << ": " << strings[i];
        t.valid += verdicts[i]["full"].get<bool>() ? 1 : 0;
      } else {
        EXPECT_TRUE(verdicts[i]["prefix"].get<bool>()) << model << " " << families[f].name << ": " << strings[i];
        t.incomplete_prefix += verdicts[i]["prefix"].get<bool>() ? 1 : 0;
      }
    }
  }
  // JSON: python3-jsonschema, every family in one run.
  const nlohmann::json verdicts = grammar::testing::RunPython("validate_json.py", json_cases);
  EXPECT_EQ(verdicts.size(), json_cases.size());
  for (size_t c = 0; c < json_samples.size() && c < verdicts.size(); ++c) {
    for (size_t i = 0; i < json_samples[c].size(); ++i) {
      const bool ok = verdicts[c][i].is_null();
      EXPECT_TRUE(ok) << model << " schema case " << c << ": " << json_samples[c][i]->reply << " -- " << verdicts[c][i];
      tally["json"].valid += ok ? 1 : 0;
    }
  }
  for (const auto& [kind, t] : tally) {
    std::printf("[ structured ] %s %s: %d replies, %d complete (%d valid), %d cut by max_new_tokens "
                "(CONSTRAINT_INCOMPLETE; %d checked as viable prefixes)\n",
                model.c_str(), kind.c_str(), t.total, t.complete, t.valid, t.incomplete, t.incomplete_prefix);
  }
  return tally;
}

TEST(ConstraintValidityTest, SampledRepliesAreValidOnARandomModelAndTheDemoModel) {
  constexpr int kSeeds = 9;
  const std::vector<Family> families = Families();
  ASSERT_GE(kSchemas.size(), 20u);
  int total = 0, complete = 0, valid = 0;
  {
    auto engine = StartEngine(/*context=*/1024);
    const std::vector<Sample> samples = SampleReplies(*engine, families, kSeeds, /*max_new_tokens=*/400, /*gbnf_max_new_tokens=*/150);
    for (const auto& [kind, t] : Validate(families, samples, "random-weight tiny model")) {
      total += t.total, complete += t.complete, valid += t.valid;
      EXPECT_GT(t.complete, t.total / 4) << kind << ": too few replies completed to mean anything";
    }
  }
  {
    auto service = MakeService(std::filesystem::path(NIELS_SOURCE_DIR) / "models/niels-demo", EngineOptions{});
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    const std::vector<Sample> samples = SampleReplies(**service, families, kSeeds, /*max_new_tokens=*/200, /*gbnf_max_new_tokens=*/100);
    for (const auto& [kind, t] : Validate(families, samples, "demo model")) {
      total += t.total, complete += t.complete, valid += t.valid;
      EXPECT_GT(t.complete, t.total / 4) << kind << ": too few replies completed to mean anything";
    }
  }
  std::printf("[ structured ] in all: %d replies, %d complete, %d valid\n", total, complete, valid);
  EXPECT_GE(total, 500);
  EXPECT_EQ(valid, complete);
}

}  // namespace constraint_validity_test
}  // namespace
}  // namespace niels::daemon::handlers::testing
