#include "client/chat/chat_options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/chat/render.h"

namespace niels::client {
namespace {

namespace fs = std::filesystem;

// Parses a command line given as words after the program name.
std::variant<ChatOptions, int> Parse(std::vector<std::string> words, std::string* out = nullptr,
                                     std::string* err = nullptr) {
  std::vector<const char*> argv = {"niels-chat"};
  for (const auto& w : words) argv.push_back(w.c_str());
  std::ostringstream o, e;
  auto result = ParseChatFlags(static_cast<int>(argv.size()), argv.data(), o, e);
  if (out) *out = o.str();
  if (err) *err = e.str();
  return result;
}

ChatOptions MustParse(std::vector<std::string> words) {
  auto result = Parse(std::move(words));
  EXPECT_TRUE(std::holds_alternative<ChatOptions>(result));
  return std::holds_alternative<ChatOptions>(result) ? std::get<ChatOptions>(result) : ChatOptions{};
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/niels-chat-options-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& contents) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << contents;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ChatFlagsTest, DefaultsAreTheOriginalCli) {
  const ChatOptions o = MustParse({});
  EXPECT_EQ(o.max_new_tokens, 256);
  EXPECT_FLOAT_EQ(o.temperature, 0.9f);
  EXPECT_EQ(o.top_k, 50);
  EXPECT_FLOAT_EQ(o.top_p, 0.0f);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_FALSE(o.repetition_penalty.has_value());
  EXPECT_FALSE(o.system_text.has_value());
  EXPECT_TRUE(o.system_file.empty());
  EXPECT_TRUE(o.use_kv_cache);
  EXPECT_FALSE(o.greedy);
  EXPECT_FALSE(o.stream);
  EXPECT_FALSE(o.prompt.has_value());
  EXPECT_TRUE(o.socket.empty());
  EXPECT_TRUE(o.ckpt.empty());
  EXPECT_FALSE(o.stats);
}

TEST(ChatFlagsTest, SessionAndResume) {
  EXPECT_EQ(MustParse({"--session", "0123abcd"}).session, "0123abcd");
  EXPECT_FALSE(MustParse({}).resume);
  const ChatOptions resume = MustParse({"--resume", "--system", "pirate"});
  EXPECT_TRUE(resume.resume);
  EXPECT_EQ(resume.system_text, std::optional<std::string>("pirate"));
  // A continued session brings its own system prompt; --resume picks one itself.
  for (const auto& words : std::vector<std::vector<std::string>>{{"--session", "x", "--system", "y"},
                                                                  {"--session", "x", "--system-file", "f"},
                                                                  {"--session", "x", "--resume"}}) {
    std::string err;
    auto result = Parse(words, nullptr, &err);
    ASSERT_TRUE(std::holds_alternative<int>(result)) << words[2];
    EXPECT_EQ(std::get<int>(result), 2);
    EXPECT_NE(err.find("excludes"), std::string::npos) << err;
  }
}

TEST(ChatFlagsTest, EveryFlagIsParsed) {
  const ChatOptions o = MustParse({"--max-new-tokens", "7", "--temperature", "0.5", "--top-k", "0",
                                   "--top-p", "0.8", "--seed", "123", "--system", "be brief",
                                   "--system-file", "/x/sys.txt", "--no-kv-cache", "--greedy",
                                   "--ckpt", "/m", "--socket", "/tmp/s.sock", "--repetition-penalty",
                                   "1.3", "--stream", "-p", "hello there", "--verbose"});
  EXPECT_EQ(o.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(o.temperature, 0.5f);
  EXPECT_EQ(o.top_k, 0);
  EXPECT_FLOAT_EQ(o.top_p, 0.8f);
  EXPECT_EQ(o.seed, 123u);
  EXPECT_EQ(o.system_text, std::optional<std::string>("be brief"));
  EXPECT_EQ(o.system_file, "/x/sys.txt");
  EXPECT_FALSE(o.use_kv_cache);
  EXPECT_TRUE(o.greedy);
  EXPECT_EQ(o.ckpt, "/m");
  EXPECT_EQ(o.socket, "/tmp/s.sock");
  EXPECT_EQ(o.repetition_penalty, std::optional<float>(1.3f));
  EXPECT_TRUE(o.stream);
  EXPECT_EQ(o.prompt, std::optional<std::string>("hello there"));
  EXPECT_TRUE(o.stats);
  EXPECT_EQ(MustParse({"--prompt", "x", "--stats"}).prompt, std::optional<std::string>("x"));
  EXPECT_TRUE(MustParse({"--stats"}).stats);
  EXPECT_EQ(MustParse({"--system", ""}).system_text, std::optional<std::string>(""));
  EXPECT_TRUE(MustParse({"--hide-reasoning"}).hide_reasoning);
  EXPECT_FALSE(MustParse({}).hide_reasoning);
  EXPECT_EQ(MustParse({}).enable_thinking, std::nullopt);
  EXPECT_EQ(MustParse({"--think"}).enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(MustParse({"--no-think"}).enable_thinking, std::optional<bool>(false));
  const ChatOptions tools =
      MustParse({"--tools", "/x/tools.json", "--tool-exec", "jq .city", "--tool-choice", "get_weather"});
  EXPECT_EQ(tools.tools_file, "/x/tools.json");
  EXPECT_EQ(tools.tool_exec, "jq .city");
  EXPECT_EQ(tools.tool_choice, "get_weather");
}

TEST(ChatFlagsTest, HelpAndVersionExitZeroUsageErrorsExitTwo) {
  std::string out, err;
  auto help = Parse({"--help"}, &out, &err);
  ASSERT_TRUE(std::holds_alternative<int>(help));
  EXPECT_EQ(std::get<int>(help), 0);
  for (const char* flag : {"--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--system",
                           "--system-file", "--no-kv-cache", "--greedy", "--ckpt", "--socket",
                           "--repetition-penalty", "--stream", "--prompt", "--version", "--hide-reasoning",
                           "--think", "--no-think", "--tools", "--tool-exec", "--tool-choice"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
  auto version = Parse({"--version"}, &out, &err);
  ASSERT_TRUE(std::holds_alternative<int>(version));
  EXPECT_EQ(std::get<int>(version), 0);
  EXPECT_EQ(out, std::string("niels-chat ") + NIELSD_VERSION + "\n");

  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--top-p", "1.5"}, {"--top-k", "-1"}, {"--temperature", "-0.1"}, {"--max-new-tokens", "0"},
           {"--bogus"}, {"--seed", "abc"}, {"--repetition-penalty", "0"}, {"--think", "--no-think"},
           {"--tool-exec", "cat"}, {"--tool-choice", "required"}}) {
    auto r = Parse(bad, &out, &err);
    ASSERT_TRUE(std::holds_alternative<int>(r)) << bad[0];
    EXPECT_EQ(std::get<int>(r), 2) << bad[0];
    EXPECT_FALSE(err.empty());
  }
}

TEST(ToolsFileTest, OpenAiToolsBecomeAToolSetAndBadEntriesNameThemselves) {
  auto tools = ParseOpenAiTools(
      R"([{"type": "function", "function": {"name": "a", "description": "does a", "parameters": {"type": "object"}}},
          {"name": "b"}])",
      "tools.json");
  ASSERT_TRUE(tools.ok()) << tools.status().ToString();
  ASSERT_EQ(tools->tools_size(), 2);
  EXPECT_EQ(tools->tools(0).name(), "a");
  EXPECT_EQ(tools->tools(0).description(), "does a");
  EXPECT_EQ(tools->tools(0).parameters(), R"({"type":"object"})");
  EXPECT_EQ(tools->tools(1).name(), "b");
  EXPECT_EQ(tools->tools(1).parameters(), "");
  for (const std::string& bad : {std::string("{}"), std::string("[1]"), std::string(R"([{"function": {}}])"),
                                std::string("[")}) {
    auto refused = ParseOpenAiTools(bad, "tools.json");
    EXPECT_EQ(refused.status().code(), common::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("tools.json"), std::string::npos) << refused.status().message();
  }
}

TEST(SystemPromptTest, DefaultIsExactWithTypographicApostrophes) {
  const std::string expected =
      "you are a tiny chatbot on niels\xE2\x80\x99 website. answer in third person about niels. "
      "do not invent personal facts; if you don\xE2\x80\x99t know, say you don\xE2\x80\x99t know.";
  EXPECT_EQ(std::string(common::kDefaultSystemPrompt), expected);
  EXPECT_EQ(*ResolveSystemPrompt(ChatOptions{}), expected);
}

TEST(SystemPromptTest, FileWinsOverTextWinsOverDefault) {
  TempDir dir;
  const std::string file = dir.Write("sys.txt", "from the file\n");
  ChatOptions o;
  o.system_text = "from the flag";
  EXPECT_EQ(*ResolveSystemPrompt(o), "from the flag");
  o.system_file = file;
  EXPECT_EQ(*ResolveSystemPrompt(o), "from the file");
  o.system_text.reset();
  EXPECT_EQ(*ResolveSystemPrompt(o), "from the file");
  o.system_file = dir.Write("crlf.txt", "two\nlines\r\n");
  EXPECT_EQ(*ResolveSystemPrompt(o), "two\nlines");
  o.system_file = dir.Write("empty.txt", "");
  EXPECT_EQ(*ResolveSystemPrompt(o), "");
}

TEST(SystemPromptTest, UnreadableOrInvalidFileIsAnError) {
  TempDir dir;
  ChatOptions o;
  o.system_file = dir.path() + "/missing.txt";
  auto missing = ResolveSystemPrompt(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.txt"), std::string::npos);
  o.system_file = dir.Write("latin1.txt", "caf\xE9");
  auto latin1 = ResolveSystemPrompt(o);
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(latin1.status().message().find("UTF-8"), std::string::npos);
}

TEST(BuildChatRequestTest, CarriesOptions) {
  ChatOptions o;
  auto r = BuildChatRequest(o, "sid", "hi");
  EXPECT_EQ(r.session_id(), "sid");
  EXPECT_EQ(r.user_text(), "hi");
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.9f);
  EXPECT_EQ(r.sampling().top_k(), 50);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.0f);
  EXPECT_EQ(r.sampling().seed(), 42u);
  EXPECT_FALSE(r.sampling().has_repetition_penalty());
  EXPECT_EQ(r.max_new_tokens(), 256);
  EXPECT_FALSE(r.has_use_kv_cache());  // the daemon's default (true) applies
  EXPECT_FALSE(r.stream());
  EXPECT_FALSE(r.has_enable_thinking());  // the template's default

  o.enable_thinking = true;
  EXPECT_TRUE(BuildChatRequest(o, "sid", "hi").enable_thinking());
  o.enable_thinking = false;
  r = BuildChatRequest(o, "sid", "hi");
  EXPECT_TRUE(r.has_enable_thinking());
  EXPECT_FALSE(r.enable_thinking());

  o.greedy = true;
  o.temperature = 0.7f;
  o.use_kv_cache = false;
  o.stream = true;
  o.repetition_penalty = 1.2f;
  r = BuildChatRequest(o, "sid", "hi");
  EXPECT_TRUE(r.sampling().has_temperature());
  EXPECT_EQ(r.sampling().temperature(), 0.0f);
  EXPECT_TRUE(r.has_use_kv_cache());
  EXPECT_FALSE(r.use_kv_cache());
  EXPECT_TRUE(r.stream());
  EXPECT_FLOAT_EQ(r.sampling().repetition_penalty(), 1.2f);

  EXPECT_FALSE(r.has_tool_choice());
  for (const auto& [flag, mode] : std::vector<std::pair<std::string, v1::ToolChoice::Mode>>{
           {"auto", v1::ToolChoice::AUTO}, {"none", v1::ToolChoice::NONE},
           {"required", v1::ToolChoice::REQUIRED}, {"get_weather", v1::ToolChoice::NAMED}}) {
    o.tool_choice = flag;
    r = BuildChatRequest(o, "sid", "hi");
    EXPECT_EQ(r.tool_choice().mode(), mode) << flag;
    EXPECT_EQ(r.tool_choice().name(), mode == v1::ToolChoice::NAMED ? flag : "") << flag;
  }
}

// --json-schema FILE, --grammar FILE, --json: at most one; the file's text goes into every turn's
// request; unreadable or non-UTF-8 files are errors naming the flag and the file.
TEST(ConstraintFlagsTest, ParsedResolvedAndSent) {
  TempDir dir;
  const std::string schema = dir.Write("s.json", R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const std::string grammar = dir.Write("g.gbnf", "root ::= \"yes\" | \"no\"\n");
  ChatOptions o = MustParse({"--json-schema", schema});
  EXPECT_EQ(o.json_schema_file, schema);
  auto c = ResolveConstraint(o);
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status().ToString();
  EXPECT_EQ((*c)->json_schema(), R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  o.constraint = *c;
  EXPECT_EQ(BuildChatRequest(o, "sid", "hi").constraint().json_schema(), (*c)->json_schema());

  o = MustParse({"--grammar", grammar});
  c = ResolveConstraint(o);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->gbnf(), "root ::= \"yes\" | \"no\"\n");
  o = MustParse({"--json"});
  c = ResolveConstraint(o);
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_TRUE((*c)->has_any_json());
  o = MustParse({});
  c = ResolveConstraint(o);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  EXPECT_FALSE(BuildChatRequest(o, "sid", "hi").has_constraint());

  for (const auto& words : std::vector<std::vector<std::string>>{
           {"--json", "--grammar", grammar}, {"--json-schema", schema, "--grammar", grammar}, {"--json-schema", schema, "--json"}}) {
    std::string err;
    EXPECT_EQ(std::get<int>(Parse(words, nullptr, &err)), 2) << words[0];
    EXPECT_NE(err.find("excludes"), std::string::npos) << err;
  }
  o = MustParse({"--json-schema", dir.path() + "/missing.json"});
  c = ResolveConstraint(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--json-schema"), std::string::npos);
  EXPECT_NE(c.status().message().find("missing.json"), std::string::npos);
  o = MustParse({"--grammar", dir.Write("latin1.gbnf", "root ::= \"caf\xE9\"")});
  c = ResolveConstraint(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("UTF-8"), std::string::npos);
}

TEST(CkptTest, MatchesModelDirFileInsideOrName) {
  TempDir dir;
  fs::create_directories(dir.path() + "/model");
  const std::string weights = dir.Write("model/model.safetensors", "w");
  dir.Write("other.safetensors", "w");
  fs::create_directory_symlink(dir.path() + "/model", dir.path() + "/link");
  niels::v1::InfoResponse info;
  info.set_model_name("niels-demo");
  info.set_model_path(dir.path() + "/model");

  EXPECT_TRUE(CkptMatchesModel(dir.path() + "/model", info));
  EXPECT_TRUE(CkptMatchesModel(dir.path() + "/model/", info));
  EXPECT_TRUE(CkptMatchesModel(weights, info));
  EXPECT_TRUE(CkptMatchesModel(dir.path() + "/link", info));
  EXPECT_TRUE(CkptMatchesModel(dir.path() + "/model/../model", info));
  EXPECT_TRUE(CkptMatchesModel("niels-demo", info));
  EXPECT_FALSE(CkptMatchesModel(dir.path() + "/other.safetensors", info));
  EXPECT_FALSE(CkptMatchesModel(dir.path(), info));
  EXPECT_FALSE(CkptMatchesModel(dir.path() + "/nope", info));
  EXPECT_FALSE(CkptMatchesModel("niels-other", info));
  // The daemon reporting the weights file instead of its directory still matches.
  info.set_model_path(weights);
  EXPECT_TRUE(CkptMatchesModel(dir.path() + "/model", info));
}

TEST(FormatStatsTest, NamesEveryCounter) {
  niels::v1::ChatResponse r;
  r.set_stop_reason(niels::v1::EOT);
  r.set_session_length(120);
  r.set_truncated_turns(1);
  auto* s = r.mutable_stats();
  s->set_prompt_tokens(100);
  s->set_reused_tokens(90);
  s->set_prefilled_tokens(10);
  s->set_generated_tokens(20);
  s->set_used_kv_cache(true);
  s->set_time_to_first_token_ms(12.345);
  s->set_decode_tokens_per_s(250.0);
  EXPECT_EQ(FormatStats(r, "0123abcd"),
            "prompt_tokens=100 reused_tokens=90 prefilled_tokens=10 generated_tokens=20 "
            "used_kv_cache=true ttft_ms=12.35 decode_tok_s=250.0 queue_ms=0.00 truncated_turns=1 "
            "stop_reason=EOT session_length=120 session=0123abcd");
}

TEST(FormatLogprobsTest, OneLinePerTokenWithItsAlternativesEscaped) {
  niels::v1::ChatResponse r;
  auto add = [&r](const std::string& bytes, float logprob, std::vector<std::pair<std::string, float>> top) {
    niels::v1::StepInfo& step = *r.add_steps();
    step.set_text_bytes(bytes);
    step.set_logprob(logprob);
    for (const auto& [text, lp] : top) {
      niels::v1::TokenAlternative& alternative = *step.add_top();
      alternative.set_text_bytes(text);
      alternative.set_logprob(lp);
    }
  };
  add(" Hi", -0.25f, {{" Hi", -0.25f}, {"Hello", -1.5f}});
  add("\n'\\", -2.0f, {});
  add("\xc3\xa9\xe2\x82", -0.5f, {{"", -3.0f}});  // a whole character, then a cut one; a special id
  EXPECT_EQ(FormatLogprobs(r, false),
            "  ' Hi' -0.250  | ' Hi' -0.250  | 'Hello' -1.500\n"
            "  '\\n\\'\\\\' -2.000\n"
            "  '\xc3\xa9\\xe2\\x82' -0.500  | '' -3.000\n");
  EXPECT_EQ(FormatLogprobs(r, true).substr(0, 4), "\x1b[2m");
  EXPECT_TRUE(FormatLogprobs(niels::v1::ChatResponse(), true).empty());
}

TEST(PickResumeSessionTest, MostRecentOfThisModelWithExactlyThatSystemPrompt) {
  niels::v1::ListSessionsResponse list;
  auto add = [&](const std::string& id, std::optional<std::string> system, double last_used, bool other = false) {
    auto* info = list.add_sessions();
    info->set_session_id(id);
    info->set_has_system_prompt(system.has_value());
    if (system) info->set_system_prompt_text(*system);
    info->set_last_used_unix_s(last_used);
    info->set_other_model(other);
  };
  EXPECT_EQ(PickResumeSession(list, "p"), "");
  add("a", "p", 1.0);
  add("b", "p", 3.0);
  add("c", "p ", 9.0);             // not exactly the same text
  add("d", std::nullopt, 9.0);     // no system message at all
  add("e", "p", 9.0, /*other=*/true);
  EXPECT_EQ(PickResumeSession(list, "p"), "b");
  add("f", "", 2.0);
  EXPECT_EQ(PickResumeSession(list, ""), "f");  // an empty system prompt is still one
}

TEST(Utf8Test, AcceptsWellFormedRejectsMalformed) {
  struct Case {
    std::string bytes;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"", true},
      {"plain ascii", true},
      {"niels\xE2\x80\x99", true},          // U+2019
      {"\xC3\xA9", true},                   // U+00E9
      {"\xF0\x9F\x98\x80", true},           // U+1F600
      {"\xF4\x8F\xBF\xBF", true},           // U+10FFFF
      {"\xE9", false},                      // latin-1 e-acute
      {"\xC3", false},                      // truncated
      {"\xE2\x80", false},                  // truncated
      {"\x80", false},                      // lone continuation
      {"\xC0\xAF", false},                  // overlong '/'
      {"\xE0\x80\xAF", false},              // overlong '/'
      {"\xED\xA0\x80", false},              // surrogate U+D800
      {"\xF4\x90\x80\x80", false},          // U+110000
      {"\xF5\x80\x80\x80", false},
      {"ok\xE2\x28\xA1", false},            // bad continuation
  };
  for (const auto& c : cases) EXPECT_EQ(IsValidUtf8(c.bytes), c.valid) << testing::PrintToString(c.bytes);
}

}  // namespace
}  // namespace niels::client
