// GBNF syntax: a table of grammars with strings each must accept or refuse (the expectations are
// written from llama.cpp's grammar README, not from our output), a table of bad grammars with the
// position and reason of their error, and strict UTF-8 at the byte level.

#include <gtest/gtest.h>

#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/matcher.h"

namespace niels::daemon::grammar {
namespace {

struct SyntaxCase {
  const char* grammar;
  std::vector<std::string> accepted;
  std::vector<std::string> refused;
};

bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.AcceptBytes(text).ok() && m.IsComplete();
}

TEST(GbnfParserTest, SyntaxTable) {
  const std::vector<SyntaxCase> cases = {
      {"root ::= \"a\" | \"b\"\n", {"a", "b"}, {"", "ab", "c"}},
      {"root ::= \"a\" |\n  \"b\"\n", {"a", "b"}, {"ab"}},                       // newline after |
      {"root ::= (\n  \"a\"\n  \"b\" # comment\n)\n", {"ab"}, {"a", "b"}},        // newlines in ( )
      {"# leading comment\nroot ::= x # trailing\nx ::= \"x\"\n", {"x"}, {""}},
      {"root ::= \"a\"{2}\n", {"aa"}, {"a", "aaa"}},
      {"root ::= \"a\"{2,}\n", {"aa", "aaaaa"}, {"a"}},
      {"root ::= \"a\"{1,3}\n", {"a", "aaa"}, {"", "aaaa"}},
      {"root ::= \"a\"{0,2} \"b\"\n", {"b", "ab", "aab"}, {"aaab"}},
      {"root ::= \"ab\"* \"c\"\n", {"c", "abc", "ababc"}, {"ac", "abac"}},         // a literal is one item
      {"root ::= \"a\"+?\n", {"", "a", "aaa"}, {"b"}},                              // ("a"+)?
      {"root ::= [a-c0-9_]+\n", {"a", "0b_9"}, {"d", ""}},
      {"root ::= [^a-c\\n]\n", {"d", "\xc3\xa9", "\xf0\x9f\x98\x80"}, {"a", "\n"}},
      {"root ::= [-+]? [0-9]\n", {"-1", "+2", "3"}, {"--1"}},
      {"root ::= [a-]\n", {"a", "-"}, {"b"}},                                          // '-' last is itself
      {"root ::= [\\]\\[\\-]\n", {"]", "[", "-"}, {"\\"}},
      {"root ::= .\n", {"\n", "x", "\xe3\x81\x82", "\xf4\x8f\xbf\xbf"}, {"", "xy"}},
      {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\"\n", {"A\xc3\xa9\xf0\x9f\x98\x80\t\"\\"}, {"A"}},
      {"root ::= [\\u3041-\\u309F]+\n", {"\xe3\x81\x82\xe3\x81\x84"}, {"a"}},
      {"root ::= \"\xe3\x81\x82\" [\xe3\x81\x81-\xe3\x82\x9f]\n", {"\xe3\x81\x82\xe3\x81\x84"}, {"\xe3\x81\x82"}},
      {"root ::= x x\r\nx ::= \"y\"\r\n", {"yy"}, {"y"}},                               // CRLF
      {"root ::= \"\" | \"a\"\n", {"", "a"}, {"b"}},
      {"root  ::=  item+\nitem ::= \"- \" [^\\n]+ \"\\n\"\n", {"- a\n- bc\n"}, {"- a", "-a\n"}},
      {"root ::= Ab-9\nAb-9 ::= \"ok\"\n", {"ok"}, {}},                                 // names: [a-zA-Z0-9-]
      {"root ::= \"a\" { 2 , 3 }\n", {"aa", "aaa"}, {"a"}},
  };
  for (const SyntaxCase& c : cases) {
    SCOPED_TRACE(c.grammar);
    auto g = CompiledGrammar::FromGbnf(c.grammar);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    for (const std::string& s : c.accepted) EXPECT_TRUE(Accepts(*g, s)) << "should accept " << s;
    for (const std::string& s : c.refused) EXPECT_FALSE(Accepts(*g, s)) << "should refuse " << s;
  }
}

struct ErrorCase {
  std::string grammar;
  std::string message;  // expected substring of the status message
};

// 60 rules of 9999 repetitions each: beyond GrammarLimits::max_symbols.
std::string ManyRepetitions() {
  std::string g = "root ::= r0\n";
  for (int i = 0; i < 60; ++i) g += "r" + std::to_string(i) + " ::= \"a\"{9999}\n";
  return g;
}

TEST(GbnfParserTest, ErrorTable) {
  const std::vector<ErrorCase> cases = {
      {"root ::= foo\n", "grammar line 1, column 10: unknown rule 'foo'"},
      {"a ::= \"x\"\n", "no 'root' rule"},
      {"root ::= \"abc\n", "line 1, column 10: unterminated string literal"},
      {"root ::= [a-z\n", "line 1, column 10: unterminated character class"},
      {"root ::= (\"a\"\n", "expected ')' to close the group opened at line 1, column 10"},
      {"root ::= \"a\")\n", "line 1, column 13: unexpected ')' without a matching '('"},
      {"root ::= root \"a\"\n", "line 1, column 1: left recursion: 'root' -> 'root'"},
      {"root ::= a\na ::= b \"x\"\nb ::= a | \"y\"\n", "line 2, column 1: left recursion: 'a' -> 'b' -> 'a'"},
      {"root ::= a\na ::= \"x\"? a \"y\" | \"z\"\n", "left recursion: 'a' -> 'a'"},  // through a nullable
      {"root ::= \"x\" root\n", "line 1, column 1: rule 'root' (line 1, column 1) can never match anything"},
      {"root ::= \"a\" | b\nb ::= \"b\" b\n", "line 2, column 1: rule 'b' (line 2, column 1) can never match"},
      {"root ::= (\"a\"?)*\n", "line 1, column 16: the repetition '*' repeats something that can match the empty string"},
      {"root ::= [z-a]\n", "line 1, column 11: character range U+007A-U+0061 ends before it starts"},
      {"root ::= [^\\x00-\\U0010FFFF]\n", "line 1, column 10: character class matches no character"},
      {"root ::= []\n", "line 1, column 10: character class matches no character"},
      {"root ::= \"\\q\"\n", "line 1, column 11: unknown escape '\\q'"},
      {"root ::= \"\\x4\"\n", "line 1, column 11: expected 2 hex digits after '\\x'"},
      {"root ::= \"\\uD800\"\n", "U+D800 is not a Unicode scalar value"},
      {"root ::= \"\\U00110000\"\n", "U+110000 is not a Unicode scalar value"},
      {"root ::= x{3,2}\nx ::= \"a\"\n", "line 1, column 11: repetition {3,2} has its maximum below its minimum"},
      {"root ::= \"a\"{100000}\n", "line 1, column 14: repetition count too large (the limit is 10000)"},
      {"root ::= \"a\"{,3}\n", "line 1, column 14: expected a number in the repetition, found ','"},
      {"root ::= \"a\"{2;\n", "expected ',' or '}' in the repetition, found ';'"},
      {"root ::= * \"a\"\n", "line 1, column 10: '*' has nothing before it to repeat"},
      {"root ::= <[12]>\n", "line 1, column 10: token references (<...>, !<...>) are not supported"},
      {"root \"a\"\n", "line 1, column 6: expected '::=' after the rule name 'root', found '\"'"},
      {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice (first at line 1, column 1)"},
      {"::= \"a\"\n", "line 1, column 1: expected a rule name, found ':'"},
      {"root ::= \"a\"\n| \"b\"\n", "line 2, column 1: expected a rule name, found '|'"},
      {"root ::= \"\xff\"\n", "line 1, column 11: invalid UTF-8"},
      {"root ::= \"\xc0\x80\"\n", "invalid UTF-8"},        // overlong
      {"root ::= \"\xed\xa0\x80\"\n", "invalid UTF-8"},    // surrogate
      {"root ::= \"a\" ^\n", "line 1, column 14: unexpected '^' in rule 'root'"},
      {"root ::= \"\\", "unexpected end after '\\'"},
      {std::string("root ::= ") + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n",
       "groups nested deeper than 200"},
      {ManyRepetitions(), "grammar too large: more than 1000000 symbols"},
      {std::string("root ::= \"") + std::string(2 << 20, 'a') + "\"\n", "grammar too large: 2097164 bytes (the limit is 1048576)"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.grammar.substr(0, 80));
    auto g = CompiledGrammar::FromGbnf(c.grammar);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.message), std::string::npos) << g.status().message();
  }
}

TEST(GbnfParserTest, BytesAreStrictUtf8) {
  auto g = CompiledGrammar::FromGbnf("root ::= .*\n");
  ASSERT_TRUE(g.ok());
  // Valid edges of every length, then invalid forms (overlong, surrogate, above U+10FFFF, stray
  // continuation, bad lead bytes, truncated then ASCII).
  for (const std::string& ok : {std::string("\x7f"), std::string("\xc2\x80"), std::string("\xdf\xbf"),
                                std::string("\xe0\xa0\x80"), std::string("\xed\x9f\xbf"), std::string("\xee\x80\x80"),
                                std::string("\xf0\x90\x80\x80"), std::string("\xf4\x8f\xbf\xbf")}) {
    EXPECT_TRUE(Accepts(*g, ok));
  }
  for (const std::string& bad : {std::string("\xc0\x80"), std::string("\xc1\xbf"), std::string("\xe0\x9f\xbf"),
                                 std::string("\xed\xa0\x80"), std::string("\xf0\x8f\xbf\xbf"),
                                 std::string("\xf4\x90\x80\x80"), std::string("\xf5\x80\x80\x80"),
                                 std::string("\x80"), std::string("\xff"), std::string("\xc3" "a")}) {
    Matcher m(*g);
    EXPECT_FALSE(m.AcceptBytes(bad).ok());
  }
  Matcher m(*g);  // a character split across calls; incomplete is not complete
  ASSERT_TRUE(m.AcceptBytes("\xf0\x9f").ok());
  EXPECT_FALSE(m.IsComplete());
  EXPECT_EQ(m.MinBytesToComplete(), 2u);
  ASSERT_TRUE(m.AcceptBytes("\x98\x80").ok());
  EXPECT_TRUE(m.IsComplete());
}

TEST(GbnfParserTest, AllowedBytesAndMinimumCompletion) {
  auto g = CompiledGrammar::FromGbnf("root ::= \"ab\" [\\u00e9\\u4e00] | \"xyz\"\n");
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  std::bitset<256> want;
  want.set('a');
  want.set('x');
  EXPECT_EQ(m.AllowedBytes(), want);
  EXPECT_EQ(m.MinBytesToComplete(), 3u);  // "xyz" or "ab" + 2-byte é
  ASSERT_TRUE(m.AcceptBytes("ab").ok());
  want.reset();
  want.set(0xC3);
  want.set(0xE4);
  EXPECT_EQ(m.AllowedBytes(), want);
  ASSERT_TRUE(m.AcceptBytes("\xe4").ok());
  want.reset();
  want.set(0xB8);
  EXPECT_EQ(m.AllowedBytes(), want);
  EXPECT_FALSE(m.AcceptBytes("\xb9").ok());  // U+4E40.. is not in the class
}

TEST(GbnfParserTest, LimitsAreRuntimeErrorsNotCrashes) {
  auto g = CompiledGrammar::FromGbnf("root ::= \"[\" root \"]\" | \"x\"\n");
  ASSERT_TRUE(g.ok());
  MatcherLimits limits;
  limits.max_stack_depth = 50;
  Matcher m(*g, limits);
  const common::Status s = m.AcceptBytes(std::string(100, '['));
  EXPECT_EQ(s.code(), common::StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("nesting deeper than 50"), std::string::npos);
  EXPECT_FALSE(m.status().ok());
}

}  // namespace
}  // namespace niels::daemon::grammar
