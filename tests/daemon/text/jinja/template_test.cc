// Template's contract beyond Jinja2 agreement (jinja_reference_test.cc covers that): error
// statuses and their positions, the limits against hostile templates, context checks, the chat
// context, concurrent renders.
#include "daemon/text/jinja/template.h"

#include <gtest/gtest.h>

#include <thread>

namespace niels::daemon::text::jinja {
namespace {

using common::StatusCode;
using nlohmann::ordered_json;

common::StatusOr<std::string> RenderText(const std::string& source,
                                         const ordered_json& context = ordered_json::object(),
                                         const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context, options);
}

TEST(TemplateTest, SyntaxErrorNamesLineAndColumn) {
  auto t = Template::Parse("first line\nsecond {{ 1 + }}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(), "chat template syntax error at 2:15: unexpected 'end of print statement'");
}

TEST(TemplateTest, ColumnsCountCodePoints) {
  auto t = Template::Parse("héllo 😀 {% bogus %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "chat template syntax error at 1:12: Encountered unknown tag 'bogus'.");
}

TEST(TemplateTest, RenderErrorNamesThePosition) {
  auto r = RenderText("a\n  {{ 'x' + messages }}", ordered_json{{"messages", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "chat template error at 2:10: can only concatenate str (not \"int\") to str");
}

TEST(TemplateTest, RaiseExceptionCarriesItsMessage) {
  auto r = RenderText("{% if true %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "chat template error at 2:4: Conversation roles must alternate");
}

TEST(TemplateTest, UndefinedFailsOnUseButPrintsEmpty) {
  EXPECT_EQ(*RenderText("[{{ nothing }}][{{ nothing|length }}][{{ nothing is defined }}]"), "[][0][False]");
  auto r = RenderText("{{ nothing.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "chat template error at 1:4: 'nothing' is undefined");
}

TEST(TemplateTest, SourceSizeLimit) {
  ParseOptions options;
  options.max_source_bytes = 100;
  auto t = Template::Parse(std::string(101, 'x'), options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Template::Parse(std::string(100, 'x'), options).ok());
}

TEST(TemplateTest, NestingLimit) {
  const std::string deep_expression = "{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}";
  auto t = Template::Parse(deep_expression);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("nests deeper than 64"), std::string::npos) << t.status().message();

  std::string deep_blocks;
  for (int i = 0; i < 100; ++i) deep_blocks += "{% if true %}";
  for (int i = 0; i < 100; ++i) deep_blocks += "{% endif %}";
  EXPECT_EQ(Template::Parse(deep_blocks).status().code(), StatusCode::kResourceExhausted);

  EXPECT_TRUE(Template::Parse("{{ " + std::string(20, '(') + "1" + std::string(20, ')') + " }}").ok());

  // Chains parse in loops but make the tree as deep as they are long: they count too.
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  for (const std::string& chain : {"{{ x" + repeat("|trim", 10000) + " }}", "{{ 1" + repeat(" + 1", 10000) + " }}",
                                   "{{ a" + repeat(".b", 10000) + " }}", "{{ a" + repeat("()", 10000) + " }}",
                                   "{{ 1" + repeat(" or 1", 10000) + " }}", "{{ 2" + repeat(" ** 2", 10000) + " }}",
                                   "{{ 1" + repeat(" if 1 else 2", 10000) + " }}",
                                   "{{ 1" + repeat("|string is string", 10000) + " }}"}) {
    EXPECT_EQ(Template::Parse(chain).status().code(), StatusCode::kResourceExhausted) << chain.substr(0, 20);
  }
  EXPECT_TRUE(Template::Parse("{{ x" + repeat("|trim", 40) + " }}{{ 1" + repeat(" + 1", 40) + " }}").ok());
  EXPECT_EQ(Template::Parse(std::string(10000, '-') + "x").status().code(), StatusCode::kOk);
  EXPECT_EQ(Template::Parse("{{ " + std::string(10000, '-') + "1 }}").status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Template::Parse("{{ " + std::string(10000, '[') + std::string(10000, ']') + " }}").status().code(),
            StatusCode::kResourceExhausted);
}

struct LimitCase {
  const char* name;
  std::string source;
  RenderLimits limits;
};

TEST(TemplateTest, RenderLimitsStopHostileTemplates) {
  RenderLimits small;
  small.max_output_bytes = 64 << 10;
  small.max_list_items = 10000;
  small.max_loop_iterations = 10000;
  small.max_call_depth = 8;
  small.max_work = 5'000'000;
  const LimitCase cases[] = {
      {"nested loops", "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", small},
      {"output", "{% for i in range(9000) %}0123456789{% endfor %}", small},
      {"string repetition", "{{ 'x' * 100000000000 }}", small},
      {"empty repetitions and a loop", "{{ '' * 1000000000000000000 }}{{ [] * 1000000000000000000 }}"
       "{% for i in range(100000) %}{% endfor %}", small},
      {"list repetition", "{{ ([1, 2] * 1000000000)|length }}", small},
      {"range", "{{ range(20000)|length }}", small},
      {"recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", small},
      {"work", "{% set s = 'x' * 60000 %}{% for i in range(5000) %}{% set t = s ~ i %}{% endfor %}", small},
      {"json", "{% set l = [range(5000)|list] * 5000 %}{{ l|tojson }}", small},
      {"repr", "{% set l = [range(5000)|list] * 5000 %}{{ l }}", small},
      {"replace", "{{ ('x' * 60000)|replace('x', 'yy') }}", small},
      {"indent", "{{ 'a'|indent(100000000000) }}", small},
      {"batch fill", "{{ [1]|batch(1000000000000000, 0)|list }}", small},
  };
  for (const LimitCase& c : cases) {
    RenderOptions options;
    options.limits = c.limits;
    auto r = RenderText(c.source, ordered_json::object(), options);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << c.name << ": " << r.status().ToString();
  }
  // Deep expressions inside deep macro recursion: the evaluator's own recursion bound.
  RenderOptions many_calls;
  many_calls.limits.max_call_depth = 1000;
  auto r = RenderText(
      "{% macro f(n) %}{{ 'a' + ('a' + ('a' + ('a' + ('a' + f(n - 1))))) }}{% endmacro %}{{ f(100000) }}",
      ordered_json::object(), many_calls);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("recurses deeper than 1000"), std::string::npos) << r.status().message();

  // The same shapes within the limits render.
  RenderOptions options;
  options.limits = small;
  EXPECT_TRUE(RenderText("{% for i in range(90) %}{% for j in range(90) %}{% endfor %}{% endfor %}",
                         ordered_json::object(), options)
                  .ok());
  EXPECT_TRUE(RenderText("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(7) }}",
                         ordered_json::object(), options)
                  .ok());
}

// A value nested a hundred thousand levels deep would overflow the stack when printed, compared or
// destroyed; a namespace holding itself would never be freed. Neither can be built.
TEST(TemplateTest, ValuesStayShallowAndAcyclic) {
  const std::string deep_list =
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}";
  EXPECT_EQ(RenderText(deep_list).status().code(), StatusCode::kResourceExhausted);
  const std::string deep_dict =
      "{% set ns = namespace(d={}) %}{% for i in range(1000) %}{% set ns.d = {'x': ns.d} %}{% endfor %}";
  EXPECT_EQ(RenderText(deep_dict).status().code(), StatusCode::kResourceExhausted);
  const std::string nested_ok =
      "{% set ns = namespace(l=[]) %}{% for i in range(150) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson|length }}";
  EXPECT_EQ(*RenderText(nested_ok), "302");
  for (const char* cyclic : {
           "{% set ns = namespace() %}{% set ns.me = ns %}",
           "{% set ns = namespace() %}{% set ns.l = [1, {'a': ns}] %}",
           "{% set ns = namespace() %}{% set ns.f = [ns].count %}",
           "{% set a = namespace() %}{% set b = namespace(x=a) %}",
           "{% set ns = namespace() %}{% for x in [1] %}{% set ns.l = loop %}{% endfor %}",
       }) {
    auto r = RenderText(cyclic);
    ASSERT_FALSE(r.ok()) << cyclic;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << cyclic;
    EXPECT_NE(r.status().message().find("namespace attribute cannot hold"), std::string::npos) << cyclic;
  }
}

TEST(TemplateTest, ContextMustBeAnObjectOfValidText) {
  auto t = Template::Parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Render(ordered_json::array()).status().code(), StatusCode::kInvalidArgument);
  ordered_json bad_text = {{"x", std::string("\xff\xfe")}};
  EXPECT_EQ(t->Render(bad_text).status().code(), StatusCode::kInvalidArgument);
  ordered_json deep = 1;
  for (int i = 0; i < 100; ++i) deep = ordered_json::array({deep});
  EXPECT_EQ(t->Render(ordered_json{{"x", deep}}).status().code(), StatusCode::kResourceExhausted);
  ordered_json big = {{"x", uint64_t{1} << 63}};
  EXPECT_EQ(t->Render(big).status().code(), StatusCode::kInvalidArgument);
}

TEST(TemplateTest, FormatIndicesOutOfRangeAreErrors) {
  for (const char* t : {"{{ '{99999999999999999999}'.format() }}", "{{ '{0[99999999999999999999999]}'.format([1]) }}"}) {
    auto r = RenderText(t);
    ASSERT_FALSE(r.ok()) << t;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
}

TEST(TemplateTest, TemplateMustBeValidUtf8) {
  auto t = Template::Parse("ok \xc3\x28");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(TemplateTest, ChatContextLikeTransformers) {
  auto t = Template::Parse(
      "{{ messages|length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token is defined }}|"
      "{{ eos_token }}|{{ enable_thinking }}");
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs inputs;
  inputs.messages = ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  inputs.add_generation_prompt = true;
  inputs.eos_token = "<|im_end|>";
  inputs.extra = {{"enable_thinking", false}};
  EXPECT_EQ(*RenderChat(*t, inputs), "1|None|None|True|False|<|im_end|>|False");
}

TEST(TemplateTest, StrftimeNowFormatsTheGivenTime) {
  RenderOptions options;
  options.now = std::chrono::system_clock::time_point(std::chrono::seconds(86400 * 365));  // 1971-01-01
  EXPECT_EQ(*RenderText("{{ strftime_now('%d %b %Y') }}", ordered_json::object(), options), "01 Jan 1971");
}

TEST(TemplateTest, ConcurrentRendersAgree) {
  auto t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content|upper }}"
      "{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  ordered_json context = {{"messages", ordered_json::array()}};
  for (int i = 0; i < 50; ++i)
    context["messages"].push_back({{"role", "user"}, {"content", "msg " + std::to_string(i)}});
  const std::string want = *t->Render(context);
  std::vector<std::thread> threads;
  std::vector<int> agreed(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) agreed[k] += *t->Render(context) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(agreed[k], 50);
}

}  // namespace
}  // namespace niels::daemon::text::jinja
