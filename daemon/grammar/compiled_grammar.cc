#include "daemon/grammar/compiled_grammar.h"

#include <algorithm>
#include <functional>
#include <queue>

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

// Symbols, alternatives and rules of a rule set: the work units of one linear pass over it.
uint64_t PassUnits(const RuleSet& rs) {
  uint64_t units = rs.rules.size();
  for (const RuleDef& r : rs.rules) {
    units += r.alternatives.size();
    for (const auto& alt : r.alternatives) units += alt.size();
  }
  return units;
}

// Fewest bytes each rule can match (kInfinite: none; nullable = 0), as a shortest derivation:
// Knuth's generalisation of Dijkstra's algorithm (an alternative's cost is the sum of its
// symbols', which is never below any of them). A rule is settled when it leaves the queue with its
// least cost; each alternative waits for its rule symbols to settle (one count per occurrence), and
// once all have, offers its total to its rule. Every symbol is touched once and every alternative
// enters the queue once: O(S + A log A) for S symbols and A alternatives, whatever the order of the
// rules. Charges `meter` one unit per symbol, alternative, rule and queue operation.
std::vector<uint32_t> RuleMinBytes(const RuleSet& rs, WorkMeter* meter) {
  const size_t n = rs.rules.size();
  std::vector<uint32_t> min(n, CompiledGrammar::kInfinite);
  if (!meter->Charge(PassUnits(rs))) return min;
  // Alternatives flattened: owner rule, rule symbols not yet settled, total of the settled ones.
  std::vector<uint32_t> alt_rule;
  std::vector<uint32_t> alt_pending;
  std::vector<uint32_t> alt_total;
  // uses[use_begin[r] .. use_begin[r+1]): the alternative of each occurrence of rule r.
  std::vector<uint32_t> use_begin(n + 1, 0);
  for (const RuleDef& rule : rs.rules) {
    for (const auto& alt : rule.alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::kRule) ++use_begin[s.id + 1];
      }
    }
  }
  for (size_t r = 0; r < n; ++r) use_begin[r + 1] += use_begin[r];
  std::vector<uint32_t> uses(use_begin[n]);
  std::vector<uint32_t> fill(use_begin.begin(), use_begin.end() - 1);
  using Offer = std::pair<uint32_t, uint32_t>;  // (bytes, rule)
  std::priority_queue<Offer, std::vector<Offer>, std::greater<>> queue;
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : rs.rules[r].alternatives) {
      const auto a = static_cast<uint32_t>(alt_rule.size());
      uint32_t pending = 0, total = 0;
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::kRule) {
          ++pending;
          uses[fill[s.id]++] = a;
        } else {
          total = SaturatingAdd(total, Utf8Length(rs.classes[s.id].Min()));
        }
      }
      alt_rule.push_back(static_cast<uint32_t>(r));
      alt_pending.push_back(pending);
      alt_total.push_back(total);
      if (pending == 0) queue.push({total, static_cast<uint32_t>(r)});
    }
  }
  std::vector<bool> settled(n, false);
  uint64_t queue_ops = 0;
  while (!queue.empty()) {
    const auto [bytes, r] = queue.top();
    queue.pop();
    ++queue_ops;
    if (settled[r]) continue;
    settled[r] = true;
    min[r] = bytes;
    for (uint32_t u = use_begin[r]; u < use_begin[r + 1]; ++u) {
      const uint32_t a = uses[u];
      alt_total[a] = SaturatingAdd(alt_total[a], bytes);
      if (--alt_pending[a] == 0 && !settled[alt_rule[a]]) {
        queue.push({alt_total[a], alt_rule[a]});
        ++queue_ops;
      }
    }
  }
  meter->Charge(queue_ops);
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
        for (uint32_t x = r; x != to; x = parent[x]) cycle.push_back(x);
        std::reverse(cycle.begin() + 1, cycle.end());
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
  // At most kShown rules of a long cycle are named (each description scans the text for its
  // line and column), then how many more there are, then the first again.
  constexpr size_t kShown = 8;
  std::string path;
  for (size_t i = 0; i < cycle.size(); ++i) {
    if (i >= kShown && i + 1 < cycle.size()) {
      path += fmt::format(" -> ... ({} more)", cycle.size() - 1 - i);
      i = cycle.size() - 2;
      continue;
    }
    if (i > 0) path += " -> ";
    const RuleDef& r = rs.rules[cycle[i]];
    path += r.origin == RuleDef::kNamed ? "'" + r.name + "'" : DescribeRule(rs, cycle[i], text);
  }
  return Status::InvalidArgument(fmt::format(
      "grammar {}: left recursion: {} (a rule may not begin with itself)", LineColumn(text, first.offset), path));
}

Status CheckRules(const RuleSet& rs, std::string_view text, const std::vector<uint32_t>& min, WorkMeter* meter) {
  // Each check is one pass over the symbols (the cycle search visits every "starts with" edge once).
  if (!meter->Charge(PassUnits(rs))) return meter->status();
  const std::vector<uint32_t> cycle = FindLeftRecursion(rs, min);
  if (!cycle.empty()) return LeftRecursionError(rs, text, cycle);
  if (!meter->Charge(PassUnits(rs))) return meter->status();
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
    std::string_view text, const GrammarLimits& limits, CompileWork* work) {
  WorkMeter meter = GrammarCompileMeter(limits, text.size());
  auto compile = [&]() -> common::StatusOr<std::shared_ptr<const CompiledGrammar>> {
    auto rules = ParseGbnf(text, limits, &meter);
    if (!rules.ok()) return rules.status();
    return FromRuleSet(std::move(*rules), text, &meter);
  };
  auto g = compile();
  if (work != nullptr) {
    work->grammar_units = meter.used();
    work->grammar_budget = meter.budget();
  }
  return g;
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromRuleSet(
    RuleSet rs, std::string_view text) {
  WorkMeter meter = GrammarCompileMeter(GrammarLimits(), text.size());
  return FromRuleSet(std::move(rs), text, &meter);
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromRuleSet(
    RuleSet rs, std::string_view text, WorkMeter* meter) {
  const std::vector<uint32_t> min = RuleMinBytes(rs, meter);
  if (meter->exhausted()) return meter->status();
  NIELS_RETURN_IF_ERROR(CheckRules(rs, text, min, meter));
  // Flattening and the suffix minima: one pass each.
  if (!meter->Charge(2 * PassUnits(rs))) return meter->status();

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

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Around(std::string_view outer,
                                                                                 std::string_view slot,
                                                                                 const CompiledGrammar& inner,
                                                                                 const GrammarLimits& limits) {
  WorkMeter meter = GrammarCompileMeter(limits, outer.size() + inner.source_.size());
  auto parsed = ParseGbnf(outer, limits, &meter);
  if (!parsed.ok()) return parsed.status();
  RuleSet rs = std::move(parsed).value();
  const auto named_slot = std::find_if(rs.rules.begin(), rs.rules.end(), [slot](const RuleDef& r) {
    return r.origin == RuleDef::kNamed && r.name == slot;
  });
  if (named_slot == rs.rules.end()) {
    return Status::InvalidArgument(fmt::format("grammar defines no rule '{}' (where the inner grammar goes)", slot));
  }
  const uint32_t rule_base = static_cast<uint32_t>(rs.rules.size());
  const uint32_t class_base = static_cast<uint32_t>(rs.classes.size());
  if (!meter.Charge(inner.elements_.size() + inner.alt_starts_.size() + inner.rule_count() + inner.classes_.size())) {
    return meter.status();
  }
  if (rs.rules.size() + inner.rule_count() > limits.max_rules) {
    return Status::InvalidArgument(fmt::format("grammar too large: more than {} rules", limits.max_rules));
  }
  named_slot->alternatives = {{Symbol{Symbol::kRule, rule_base + inner.root_}}};
  rs.classes.insert(rs.classes.end(), inner.classes_.begin(), inner.classes_.end());
  for (uint32_t r = 0; r < inner.rule_count(); ++r) {
    RuleDef rule;
    rule.origin = RuleDef::kGroup;
    rule.defined = true;
    for (const uint32_t start : inner.alternatives(r)) {
      std::vector<Symbol>& alt = rule.alternatives.emplace_back();
      for (uint32_t pos = start; inner.elements_[pos].kind != Element::kEnd; ++pos) {
        const Element& e = inner.elements_[pos];
        alt.push_back(e.kind == Element::kClass ? Symbol{Symbol::kClass, class_base + e.arg}
                                                : Symbol{Symbol::kRule, rule_base + e.arg});
      }
    }
    rs.rules.push_back(std::move(rule));
  }
  // Outer's text comes first, so that the positions of errors in its rules read right.
  const std::string source = fmt::format("{}\n# '{}' above is the root of this grammar:\n{}", outer, slot, inner.source_);
  return FromRuleSet(std::move(rs), source, &meter);
}

size_t CompiledGrammar::memory_bytes() const {
  size_t bytes = sizeof(CompiledGrammar) + elements_.capacity() * sizeof(Element) +
                 (alt_starts_.capacity() + alt_begin_.capacity() + suffix_min_.capacity() + rule_min_.capacity()) *
                     sizeof(uint32_t) +
                 classes_.capacity() * sizeof(CodePointSet) + source_.capacity();
  for (const CodePointSet& set : classes_) bytes += set.ranges().capacity() * sizeof(CodePointRange);
  return bytes;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::AnyJson() {
  auto g = FromGbnf(AnyJsonGbnf());
  return g.ok() ? *g : nullptr;  // the built-in grammar always compiles (json_grammar_test)
}

}  // namespace niels::daemon::grammar
