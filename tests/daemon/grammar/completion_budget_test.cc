// Completion within a budget (matcher.h, "Completion within a budget"), against brute force on
// small vocabularies: a handful of ids, several of them multi-byte, some carrying part of a UTF-8
// character, with and without every single byte as an id.
//
// Brute force explores every id sequence from the start through the matcher's own exact masks
// (the masks are held to a brute force of their own in token_mask_test), memoized on the point an
// id sequence reaches (the matcher's state and partial character: what every later answer
// depends on), so "every sequence up to N ids" is covered without enumerating repeats:
//   - T(p), the true fewest ids that complete the output from p, by exhaustive search;
//   - the bound is sound and can be followed: N(p) >= T(p), and N(p) = n > 0 finite has an allowed
//     id to a point with N <= n - 1;
//   - AllowedTokensWithin(k) is exactly {t allowed : N(after t) <= k} (end ids where complete), or
//     the unbudgeted mask when that is empty; it is a subset of brute force's {t allowed :
//     T(after t) <= k}, and how often the two are equal is printed;
//   - every id sequence the budgeted masks admit with a budget of B ids (B = 1..14, each step's
//     budget the ids left) ends complete, whenever N at the start fits B; and N at the start fits
//     every B brute force finds a completion within, except for a grammar made to show the
//     approximation (its shortest completion is not its best spelled one).

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/matcher.h"
#include "daemon/grammar/vocabulary.h"

namespace niels::daemon::grammar {
namespace {

constexpr uint32_t kNone = Matcher::kNoBound;

std::shared_ptr<const Vocabulary> MakeVocab(const std::vector<std::string>& texts, bool every_byte) {
  std::vector<VocabularyToken> tokens;
  tokens.push_back({"", TokenKind::kEndOfOutput});  // id 0 ends the output
  tokens.push_back({"", TokenKind::kNever});
  for (const std::string& t : texts) tokens.push_back({t, TokenKind::kText});
  if (every_byte) {
    for (int b = 0; b < 256; ++b) {
      if (b == 0xC0 || b == 0xC1 || b > 0xF4) continue;
      tokens.push_back({std::string(1, static_cast<char>(b)), TokenKind::kText});
    }
  }
  auto v = Vocabulary::Create(std::move(tokens));
  EXPECT_TRUE(v.ok());
  EXPECT_EQ((*v)->every_byte_is_a_token(), every_byte);
  return *v;
}

// The ids of the handful: multi-byte ids spanning symbols, a character split over ids ("\xC3",
// "\xA9" and "\xA9\"" beside the whole "\u00e9"), and ids that only a longer completion uses.
const std::vector<std::string> kHandful = {
    "{", "}", "[", "]", "\"", ",", ":", "a", "b", "0", "1", "2", "ab", "ba", "aaa", "12", "\"a", "a\"", "\"}", "{\"",
    "\":", "\"]", "\xC3", "\xA9", "\xA9\"", "\xC3\xA9", "\xC3\xA9\"", "}]", ",\"", "b\":"};

using Key = std::tuple<int32_t, uint32_t, uint8_t, uint8_t, uint8_t, bool>;
Key KeyOf(const Matcher::Snapshot& s) {
  return {s.state, s.partial.value, s.partial.remaining, s.partial.next_lo, s.partial.next_hi, s.ended};
}

class BruteForce {
 public:
  BruteForce(std::shared_ptr<const CompiledGrammar> g, std::shared_ptr<const Vocabulary> v)
      : m_(std::move(g)), v_(std::move(v)) {}

  Matcher& matcher() { return m_; }
  const Vocabulary& vocab() const { return *v_; }

  // The allowed text ids at `p` and the points after them.
  const std::vector<std::pair<int32_t, Matcher::Snapshot>>& Successors(const Matcher::Snapshot& p) {
    auto [it, fresh] = successors_.try_emplace(KeyOf(p));
    if (!fresh) return it->second;
    m_.Restore(p);
    TokenBitset mask;
    EXPECT_TRUE(m_.AllowedTokens(*v_, &mask).ok());
    for (int32_t id = 0; id < v_->size(); ++id) {
      if (!mask.Test(id) || v_->token(id).kind != TokenKind::kText) continue;
      m_.Restore(p);
      EXPECT_TRUE(m_.AcceptToken(id, *v_).ok());
      it->second.emplace_back(id, m_.snapshot());
    }
    m_.Restore(p);
    return it->second;
  }
  bool Complete(const Matcher::Snapshot& p) {
    m_.Restore(p);
    return m_.IsComplete();
  }
  // Some completion within d more ids (exhaustive, memoized).
  bool Reach(const Matcher::Snapshot& p, uint32_t d) {
    if (Complete(p)) return true;
    if (d == 0) return false;
    auto key = std::make_pair(KeyOf(p), d);
    if (auto it = reach_.find(key); it != reach_.end()) return it->second;
    bool r = false;
    for (const auto& [id, next] : Successors(p)) {
      if (Reach(next, d - 1)) {
        r = true;
        break;
      }
    }
    reach_[key] = r;
    return r;
  }
  // T(p) when at most `cap`, else kNone.
  uint32_t Fewest(const Matcher::Snapshot& p, uint32_t cap) {
    for (uint32_t d = 0; d <= cap; ++d) {
      if (Reach(p, d)) return d;
    }
    return kNone;
  }
  uint32_t Bound(const Matcher::Snapshot& p) {
    m_.Restore(p);
    return m_.CompletionBound(*v_);
  }
  TokenBitset Within(const Matcher::Snapshot& p, uint32_t k, bool* narrowed = nullptr) {
    m_.Restore(p);
    TokenBitset out;
    EXPECT_TRUE(m_.AllowedTokensWithin(*v_, *v_, k, &out, narrowed).ok()) << m_.status().ToString();
    return out;
  }

 private:
  Matcher m_;
  std::shared_ptr<const Vocabulary> v_;
  std::map<Key, std::vector<std::pair<int32_t, Matcher::Snapshot>>> successors_;
  std::map<std::pair<Key, uint32_t>, bool> reach_;
};

struct Counts {
  int points = 0, checks = 0, equal_to_brute = 0, fallbacks = 0, fallbacks_brute_fits = 0, narrowed = 0,
      sequences_checked = 0;
};

// (b) at every point within `depth` ids of the start, for every budget k < depth.
void CheckPoints(BruteForce& bf, const Matcher::Snapshot& start, uint32_t depth, Counts* counts) {
  std::map<Key, Matcher::Snapshot> seen;
  std::vector<Matcher::Snapshot> frontier = {start};
  seen[KeyOf(start)] = start;
  for (uint32_t d = 0; d < depth; ++d) {
    std::vector<Matcher::Snapshot> next;
    for (const Matcher::Snapshot& p : frontier) {
      for (const auto& [id, q] : bf.Successors(p)) {
        if (seen.emplace(KeyOf(q), q).second) next.push_back(q);
      }
    }
    frontier = std::move(next);
  }
  const int32_t end_id = 0;
  for (const auto& [key, p] : seen) {
    ++counts->points;
    const bool complete = bf.Complete(p);
    const uint32_t n = bf.Bound(p);
    const uint32_t t = bf.Fewest(p, depth + 2);
    // Sound: never below the true fewest ids.
    if (t == kNone) {
      EXPECT_TRUE(n == kNone || n > depth + 2) << "N " << n << " but no completion within " << depth + 2;
    } else {
      EXPECT_GE(n, t);
    }
    EXPECT_EQ(n == 0, complete);
    // Followable: an id to a point with N <= n - 1.
    if (n != kNone && n > 0) {
      bool step = false;
      for (const auto& [id, q] : bf.Successors(p)) step = step || bf.Bound(q) <= n - 1;
      EXPECT_TRUE(step) << "N " << n << " has no id that brings it down";
    }
    for (uint32_t k = 0; k < depth; ++k) {
      ++counts->checks;
      TokenBitset want(bf.vocab().size()), brute(bf.vocab().size());
      for (const auto& [id, q] : bf.Successors(p)) {
        if (bf.Bound(q) <= k) want.Set(id);
        if (bf.Reach(q, k)) brute.Set(id);
      }
      if (complete) want.Set(end_id), brute.Set(end_id);
      bool narrowed = false;
      const TokenBitset got = bf.Within(p, k, &narrowed);
      if (want.Count() == 0) {
        // Fallback: no id leaves room by N: the unbudgeted mask.
        ++counts->fallbacks;
        counts->fallbacks_brute_fits += brute.Count() > 0 ? 1 : 0;
        TokenBitset all;
        bf.matcher().Restore(p);
        ASSERT_TRUE(bf.matcher().AllowedTokens(bf.vocab(), &all).ok());
        EXPECT_EQ(got, all);
        EXPECT_FALSE(narrowed);
        continue;
      }
      ASSERT_EQ(got, want) << "k " << k;
      for (int32_t id = 0; id < got.size(); ++id) {
        if (got.Test(id)) {
          EXPECT_TRUE(brute.Test(id)) << "id " << id << " admitted with no completion within " << k;
        }
      }
      counts->equal_to_brute += got == brute ? 1 : 0;
      counts->narrowed += narrowed ? 1 : 0;
    }
  }
}

// (a) every id sequence the budgeted masks admit from `p` with `left` ids left ends complete.
bool AllEndComplete(BruteForce& bf, const Matcher::Snapshot& p, uint32_t left, std::map<std::pair<Key, uint32_t>, bool>* memo,
                    Counts* counts) {
  auto key = std::make_pair(KeyOf(p), left);
  if (auto it = memo->find(key); it != memo->end()) return it->second;
  ++counts->sequences_checked;
  bool ok = true;
  if (left == 0) {
    ok = bf.Complete(p);
  } else {
    const TokenBitset mask = bf.Within(p, left - 1);
    bool any = false;
    if (mask.Test(0)) {
      EXPECT_TRUE(bf.Complete(p));
      any = true;
    }
    for (const auto& [id, q] : bf.Successors(p)) {
      if (!mask.Test(id)) continue;
      any = true;
      ok = AllEndComplete(bf, q, left - 1, memo, counts) && ok;
    }
    ok = ok && any;
  }
  (*memo)[key] = ok;
  return ok;
}

struct Case {
  std::string name;
  std::shared_ptr<const CompiledGrammar> grammar;
  // N at the start is T there (false: the grammar shows the approximation: its shortest completion
  // "babab" takes 3 of these ids, the longer "aaaaaa" or "\u00e9\u00e9\"" 2).
  bool exact_at_start = true;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  auto gbnf = [&](const std::string& name, const std::string& text, bool exact = true) {
    auto g = CompiledGrammar::FromGbnf(text);
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().ToString();
    out.push_back({name, *g, exact});
  };
  gbnf("object", "root ::= \"{\\\"a\\\":\" [12]+ (\",\\\"b\\\":\" str)? \"}\"\nstr ::= \"\\\"\" [ab\\u00e9]* \"\\\"\"\n");
  gbnf("array", "root ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= \"\\\"\" [ab]{0,3} \"\\\"\" | [12]+\n");
  gbnf("nested", "root ::= \"[\" (\"{\" (\"\\\"a\\\":\" root)? \"}\")* \"]\"\n");
  gbnf("alternatives", "root ::= \"aaa\" \"aaa\" | \"ba\" \"ba\" \"b\" | \"\\u00e9\\u00e9\" \"\\\"\"\n", false);
  gbnf("required", "root ::= \"{\" [ab]* \"\\\":\" [12] \",\" [ab]* \"}\"\n");
  auto schema = CompileJsonSchema(
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"]})");
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
  out.push_back({"schema", *schema});
  return out;
}

void CheckAgainstBruteForce(bool every_byte, uint32_t depth, uint32_t max_budget) {
  const auto vocab = MakeVocab(kHandful, every_byte);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    BruteForce bf(c.grammar, vocab);
    const Matcher::Snapshot start = bf.matcher().snapshot();
    Counts counts;
    CheckPoints(bf, start, depth, &counts);
    int budgets_with_completion = 0, ended_complete = 0, missed = 0;
    std::map<std::pair<Key, uint32_t>, bool> memo;
    for (uint32_t b = 1; b <= max_budget; ++b) {
      const bool exists = bf.Reach(start, b);
      const uint32_t n = bf.Bound(start);
      if (!exists) continue;
      ++budgets_with_completion;
      if (n > b) {  // a completion exists that the bound does not see
        ++missed;
        EXPECT_FALSE(c.exact_at_start) << "budget " << b << ": N " << n;
        continue;
      }
      const bool all = AllEndComplete(bf, start, b, &memo, &counts);
      EXPECT_TRUE(all) << "budget " << b << ": an admitted id sequence ended incomplete";
      ended_complete += all ? 1 : 0;
    }
    std::printf("[ budget ] %s, %s: %d points, %d (point, budget) masks: %d fallbacks (%d where brute force fits), "
                "of the others %d equal brute force, %d narrowed; budgets 1..%u with a completion %d, every admitted sequence complete for %d, "
                "not seen by the bound %d (%d memoized points)\n",
                every_byte ? "handful + every byte" : "handful only", c.name.c_str(), counts.points, counts.checks,
                counts.fallbacks, counts.fallbacks_brute_fits, counts.equal_to_brute, counts.narrowed, max_budget, budgets_with_completion,
                ended_complete, missed, counts.sequences_checked);
    if (!c.exact_at_start) {
      EXPECT_GT(missed, 0) << "the approximation did not show";
    }
    EXPECT_GT(counts.narrowed, 0) << "the budget never took an id away: the test shows nothing";
    EXPECT_EQ(bf.matcher().status().code(), common::StatusCode::kOk);
  }
}

TEST(CompletionBudgetTest, HandfulOfIdsAgainstBruteForce) { CheckAgainstBruteForce(/*every_byte=*/false, 6, 14); }

TEST(CompletionBudgetTest, EveryByteAndAHandfulAgainstBruteForce) { CheckAgainstBruteForce(/*every_byte=*/true, 5, 14); }

// The bounds' two parts on known cases.
TEST(CompletionBudgetTest, BytesAndSpellingBounds) {
  auto g = CompiledGrammar::FromGbnf("root ::= \"{\\\"a\\\":\" [12]+ \"}\"\n");
  ASSERT_TRUE(g.ok());
  {
    Matcher m(*g);
    const auto bytes = MakeVocab({}, /*every_byte=*/true);
    EXPECT_EQ(m.MinBytesToComplete(), 7u);
    EXPECT_EQ(m.CompletionBound(*bytes), 7u) << "one byte per id";
  }
  {
    Matcher m(*g);
    const auto handful = MakeVocab(kHandful, /*every_byte=*/false);
    // w* = {"a":1}; its best split into these ids takes 5 ("{\"" "a\"" ":" "1" "}"), and 4 after
    // "{\"" or "{".
    EXPECT_EQ(m.CompletionBound(*handful), 5u);
    TokenBitset mask;
    ASSERT_TRUE(m.AllowedTokensWithin(*handful, *handful, 4, &mask).ok());
    EXPECT_GT(mask.Count(), 0);
    ASSERT_TRUE(m.AllowedTokensWithin(*handful, *handful, 3, &mask).ok());
    TokenBitset all;
    ASSERT_TRUE(m.AllowedTokens(*handful, &all).ok());
    EXPECT_EQ(mask, all) << "no id leaves room for 3 more: the unbudgeted mask";
  }
  {
    // A character begun: the bytes bound counts its remaining bytes and the shortest way on from
    // the classes that can hold it (not from the 1-byte 'a' of another class, which would say 1).
    auto h = CompiledGrammar::FromGbnf("root ::= \"a\" | \"\\u00e9\" \"bbbb\"\n");
    ASSERT_TRUE(h.ok());
    Matcher m(*h);
    ASSERT_TRUE(m.AcceptBytes("\xC3").ok());
    EXPECT_EQ(m.MinBytesToComplete(), 5u);
    EXPECT_EQ(m.CompletionBound(*MakeVocab({}, true)), 5u);
    EXPECT_EQ(m.CompletionBound(*MakeVocab(kHandful, false)), kNone) << "inside a character only bytes count";
  }
}

}  // namespace
}  // namespace niels::daemon::grammar
