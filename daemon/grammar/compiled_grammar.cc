#include "daemon/grammar/compiled_grammar.h"

#include <algorithm>

#include "daemon/grammar/gbnf_parser.h"
#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {
namespace {

using common::Status;

uint32_t SaturatingAdd(uint32_t a, uint32_t b) {
  const uint64_t s = uint64_t{a} + b;
  return s >= CompiledGrammar::kInfinite ? CompiledGrammar::kInfinite - 1 : static_cast<uint32_t>(s);
}

std::vector<bool> Reachable(const RuleSet& rs) {
  std::vector<bool> seen(rs.rules.size(), false);
  std::vector<uint32_t> todo = {rs.root};
  seen[rs.root] = true;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (const auto& alt : rs.rules[r].alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::kRule && !seen[s.id]) {
          seen[s.id] = true;
          todo.push_back(s.id);
        }
      }
    }
  }
  return seen;
}

// Fewest bytes each rule can match (kInfinite: none), by fixpoint iteration. Nullable = 0.
std::vector<uint32_t> RuleMinBytes(const RuleSet& rs) {
  std::vector<uint32_t> min(rs.rules.size(), CompiledGrammar::kInfinite);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rs.rules.size(); ++r) {
      for (const auto& alt : rs.rules[r].alternatives) {
        uint32_t total = 0;
        for (const Symbol& s : alt) {
          const uint32_t m = s.kind == Symbol::kClass ? Utf8Length(rs.classes[s.id].Min()) : min[s.id];
          if (m == CompiledGrammar::kInfinite) {
            total = m;
            break;
          }
          total = SaturatingAdd(total, m);
        }
        if (total < min[r]) {
          min[r] = total;
          changed = true;
        }
      }
    }
  }
  return min;
}

// A cycle of "starts with" edges (a -> b when b can come first in a, after nullable symbols), as
// rule ids in order, or empty.
std::vector<uint32_t> FindLeftRecursion(const RuleSet& rs, const std::vector<uint32_t>& min) {
  const size_t n = rs.rules.size();
  std::vector<std::vector<uint32_t>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : rs.rules[r].alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::kClass) break;
        edges[r].push_back(s.id);
        if (min[s.id] != 0) break;  // not nullable: nothing after it can come first
      }
    }
  }
  enum : uint8_t { kWhite, kGrey, kBlack };
  std::vector<uint8_t> color(n, kWhite);
  std::vector<uint32_t> parent(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != kWhite) continue;
    std::vector<std::pair<uint32_t, size_t>> stack = {{static_cast<uint32_t>(start), 0}};
    color[start] = kGrey;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == edges[r].size()) {
        color[r] = kBlack;
        stack.pop_back();
        continue;
      }
      const uint32_t to = edges[r][next++];
      if (color[to] == kGrey) {  // a cycle: to -> ... -> r -> to
        std::vector<uint32_t> cycle = {to};
        for (uint32_t x = r; x != to; x = parent[x]) cycle.insert(cycle.begin() + 1, x);
        cycle.push_back(to);
        return cycle;
      }
      if (color[to] == kWhite) {
        color[to] = kGrey;
        parent[to] = r;
        stack.push_back({to, 0});
      }
    }
  }
  return {};
}

Status LeftRecursionError(const RuleSet& rs, std::string_view text, const std::vector<uint32_t>& cycle) {
  const RuleDef& first = rs.rules[cycle[0]];
  if (cycle.size() == 2 && first.origin == RuleDef::kRepetition) {
    return Status::InvalidArgument(fmt::format(
        "grammar {}: the repetition '{}' repeats something that can match the empty string",
        LineColumn(text, first.offset), first.offset < text.size() ? text[first.offset] : '?'));
  }
  std::string path;
  for (size_t i = 0; i < cycle.size(); ++i) {
    if (i > 0) path += " -> ";
    const RuleDef& r = rs.rules[cycle[i]];
    path += r.origin == RuleDef::kNamed ? "'" + r.name + "'" : DescribeRule(rs, cycle[i], text);
  }
  return Status::InvalidArgument(fmt::format(
      "grammar {}: left recursion: {} (a rule may not begin with itself)", LineColumn(text, first.offset), path));
}

Status CheckRules(const RuleSet& rs, std::string_view text, const std::vector<uint32_t>& min) {
  const std::vector<uint32_t> cycle = FindLeftRecursion(rs, min);
  if (!cycle.empty()) return LeftRecursionError(rs, text, cycle);
  const std::vector<bool> reachable = Reachable(rs);
  // Report a named rule before the generated ones inside it.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t r = 0; r < rs.rules.size(); ++r) {
      if (!reachable[r] || min[r] != CompiledGrammar::kInfinite) continue;
      if (pass == 0 && rs.rules[r].origin != RuleDef::kNamed) continue;
      return Status::InvalidArgument(fmt::format(
          "grammar {}: {} can never match anything (every way through it recurses without end)",
          LineColumn(text, rs.rules[r].offset), DescribeRule(rs, static_cast<uint32_t>(r), text)));
    }
  }
  return Status::Ok();
}

}  // namespace

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromGbnf(
    std::string_view text, const GrammarLimits& limits) {
  auto rules = ParseGbnf(text, limits);
  if (!rules.ok()) return rules.status();
  return FromRuleSet(std::move(*rules), text);
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromRuleSet(
    RuleSet rs, std::string_view text) {
  const std::vector<uint32_t> min = RuleMinBytes(rs);
  NIELS_RETURN_IF_ERROR(CheckRules(rs, text, min));

  std::shared_ptr<CompiledGrammar> g(new CompiledGrammar());
  g->root_ = rs.root;
  g->classes_ = std::move(rs.classes);
  g->rule_min_ = min;
  g->alt_begin_.push_back(0);
  for (const RuleDef& rule : rs.rules) {
    for (const auto& alt : rule.alternatives) {
      g->alt_starts_.push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Symbol& s : alt) {
        g->elements_.push_back({s.kind == Symbol::kClass ? Element::kClass : Element::kRule, s.id});
      }
      g->elements_.push_back({Element::kEnd, 0});
    }
    g->alt_begin_.push_back(static_cast<uint32_t>(g->alt_starts_.size()));
  }
  // suffix_min_: walk each alternative backwards from its kEnd.
  g->suffix_min_.assign(g->elements_.size(), 0);
  for (size_t i = g->elements_.size(); i-- > 0;) {
    const Element& e = g->elements_[i];
    if (e.kind == Element::kEnd) {
      g->suffix_min_[i] = 0;
      continue;
    }
    const uint32_t own = e.kind == Element::kClass ? Utf8Length(g->classes_[e.arg].Min()) : min[e.arg];
    const uint32_t rest = g->suffix_min_[i + 1];
    g->suffix_min_[i] = (own == kInfinite || rest == kInfinite) ? kInfinite : SaturatingAdd(own, rest);
  }
  g->source_ = std::string(text);
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::AnyJson() {
  auto g = FromGbnf(AnyJsonGbnf());
  return g.ok() ? *g : nullptr;  // the built-in grammar always compiles (json_grammar_test)
}

}  // namespace niels::daemon::grammar
