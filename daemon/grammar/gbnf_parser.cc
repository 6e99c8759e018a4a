#include "daemon/grammar/gbnf_parser.h"

#include <map>
#include <unordered_map>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

std::string LineColumn(std::string_view text, size_t offset) {
  int line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (b == '\n') {
      ++line, column = 1;
    } else if ((b & 0xC0) != 0x80) {
      ++column;  // count characters, not continuation bytes
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

std::string DescribeRule(const RuleSet& rules, uint32_t id, std::string_view text) {
  const RuleDef& r = rules.rules[id];
  switch (r.origin) {
    case RuleDef::kNamed:
      return fmt::format("rule '{}' ({})", r.name, LineColumn(text, r.offset));
    case RuleDef::kGroup:
      return fmt::format("the group at {}", LineColumn(text, r.offset));
    case RuleDef::kRepetition:
      return fmt::format("the repetition '{}' at {}", r.offset < text.size() ? text[r.offset] : '?',
                         LineColumn(text, r.offset));
  }
  return "?";
}

namespace {

constexpr size_t kNone = static_cast<size_t>(-1);
constexpr uint32_t kUnbounded = static_cast<uint32_t>(-1);

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& limits, WorkMeter* meter)
      : text_(text), limits_(limits), meter_(meter) {}

  common::StatusOr<RuleSet> Parse() {
    if (text_.size() > limits_.max_text_bytes) {
      return common::Status::InvalidArgument(fmt::format(
          "grammar too large: {} bytes (the limit is {})", text_.size(), limits_.max_text_bytes));
    }
    if (!Work(text_.size())) return status_;
    SkipSpace(true);
    while (ok() && !AtEnd()) ParseRule();
    if (!ok()) return status_;
    auto root = names_.find("root");
    if (root == names_.end() || !rs_.rules[root->second].defined) {
      return common::Status::InvalidArgument("grammar defines no 'root' rule (the start rule)");
    }
    rs_.root = root->second;
    for (const RuleDef& r : rs_.rules) {
      if (!r.defined) return Fail(r.first_use_offset, fmt::format("unknown rule '{}'", r.name));
    }
    return std::move(rs_);
  }

 private:
  bool ok() const { return status_.ok(); }
  // Charges `units` to the work meter; false (with the budget's error) once it is exhausted.
  bool Work(uint64_t units) {
    if (meter_->Charge(units)) return true;
    if (status_.ok()) status_ = meter_->status();
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  common::Status Fail(size_t offset, const std::string& reason) {
    if (status_.ok()) {
      status_ = common::Status::InvalidArgument(
          fmt::format("grammar {}: {}", LineColumn(text_, offset), reason));
    }
    return status_;
  }
  // Fail() past a size budget: the same message, counted as a refusal of `budget`.
  common::Status FailOver(common::BudgetId budget, size_t offset, const std::string& reason) {
    if (status_.ok()) status_ = common::Refuse(budget, fmt::format("grammar {}: {}", LineColumn(text_, offset), reason));
    return status_;
  }

  // What the character at the current position is, for "unexpected ..." messages.
  std::string Here() const {
    if (AtEnd()) return "the end of the grammar";
    const char c = Peek();
    if (c == '\n' || c == '\r') return "a line break";
    if (static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) >= 0x80) {
      return fmt::format("byte 0x{:02X}", static_cast<uint8_t>(c));
    }
    return fmt::format("'{}'", c);
  }

  void SkipSpace(bool newline_ok) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  uint32_t RuleFor(std::string_view name, size_t use_offset) {
    auto [it, inserted] = names_.emplace(std::string(name), static_cast<uint32_t>(rs_.rules.size()));
    if (inserted) {
      RuleDef r;
      r.name = std::string(name);
      r.first_use_offset = use_offset;
      r.offset = use_offset;
      rs_.rules.push_back(std::move(r));
      CheckRuleCount(use_offset);
    }
    return it->second;
  }

  uint32_t NewGeneratedRule(RuleDef::Origin origin, size_t offset) {
    RuleDef r;
    r.origin = origin;
    r.offset = r.first_use_offset = offset;
    r.defined = true;
    rs_.rules.push_back(std::move(r));
    CheckRuleCount(offset);
    return static_cast<uint32_t>(rs_.rules.size() - 1);
  }

  void CheckRuleCount(size_t offset) {
    Work(1);
    if (rs_.rules.size() > limits_.max_rules) {
      FailOver(common::BudgetId::kGrammarRules, offset,
               fmt::format("grammar too large: more than {} rules after expanding groups and "
                               "repetitions", limits_.max_rules));
    }
  }

  void CountSymbols(size_t n, size_t offset) {
    Work(n);
    symbols_ += n;
    if (symbols_ > limits_.max_symbols) {
      FailOver(common::BudgetId::kGrammarSymbols, offset,
               fmt::format("grammar too large: more than {} symbols after expanding repetitions",
                               limits_.max_symbols));
    }
  }

  uint32_t InternClass(CodePointSet set) {
    Work(set.ranges().size());
    std::vector<std::pair<uint32_t, uint32_t>> key;
    for (const CodePointRange& r : set.ranges()) key.emplace_back(r.lo, r.hi);
    auto [it, inserted] = class_ids_.emplace(std::move(key), static_cast<uint32_t>(rs_.classes.size()));
    if (inserted) rs_.classes.push_back(std::move(set));
    return it->second;
  }

  void ParseRule() {
    const size_t start = pos_;
    const std::string_view name = ParseName();
    if (name.empty()) {
      Fail(pos_, fmt::format("expected a rule name, found {}", Here()));
      return;
    }
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") {
      Fail(pos_, fmt::format("expected '::=' after the rule name '{}', found {}", name, Here()));
      return;
    }
    pos_ += 3;
    SkipSpace(true);
    const uint32_t id = RuleFor(name, start);
    if (!ok()) return;
    if (rs_.rules[id].defined) {
      Fail(start, fmt::format("rule '{}' is defined twice (first at {})", name,
                              LineColumn(text_, rs_.rules[id].offset)));
      return;
    }
    rs_.rules[id].defined = true;
    rs_.rules[id].offset = start;
    auto alternatives = ParseAlternatives(false, 0);
    if (!ok()) return;
    rs_.rules[id].alternatives = std::move(alternatives);
    if (Peek() == '\r') {
      pos_ += Peek(1) == '\n' ? 2 : 1;
    } else if (Peek() == '\n') {
      ++pos_;
    } else if (!AtEnd()) {
      Fail(pos_, Peek() == ')' ? std::string("unexpected ')' without a matching '('")
                               : fmt::format("unexpected {} in rule '{}'", Here(), name));
      return;
    }
    SkipSpace(true);
  }

  std::vector<std::vector<Symbol>> ParseAlternatives(bool nested, int depth) {
    std::vector<std::vector<Symbol>> alternatives;
    alternatives.push_back(ParseSequence(nested, depth));
    while (ok() && Peek() == '|') {
      ++pos_;
      SkipSpace(true);
      alternatives.push_back(ParseSequence(nested, depth));
    }
    return alternatives;
  }

  std::vector<Symbol> ParseSequence(bool nested, int depth) {
    std::vector<Symbol> seq;
    size_t last_start = kNone;  // where the item the next operator applies to starts in seq
    while (ok() && !AtEnd()) {
      const char c = Peek();
      const size_t here = pos_;
      if (c == '"') {
        last_start = seq.size();
        ParseLiteral(&seq);
      } else if (c == '[') {
        last_start = seq.size();
        const uint32_t cls = ParseClass();
        seq.push_back({Symbol::kClass, cls});
        CountSymbols(1, here);
      } else if (c == '.') {
        ++pos_;
        last_start = seq.size();
        seq.push_back({Symbol::kClass, InternClass(CodePointSet::Any())});
        CountSymbols(1, here);
      } else if (IsNameChar(c)) {
        last_start = seq.size();
        const std::string_view name = ParseName();
        seq.push_back({Symbol::kRule, RuleFor(name, here)});
        CountSymbols(1, here);
      } else if (c == '(') {
        last_start = seq.size();
        seq.push_back({Symbol::kRule, ParseGroup(depth)});
        CountSymbols(1, here);
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        Repeat(&seq, last_start, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded, here);
      } else if (c == '{') {
        ParseBraces(&seq, last_start);
      } else if (c == '<' || c == '!') {
        Fail(here, "token references (<...>, !<...>) are not supported");
      } else {
        break;
      }
      if (ok()) SkipSpace(nested);
    }
    return seq;
  }

  uint32_t ParseGroup(int depth) {
    const size_t open = pos_;
    if (depth + 1 > limits_.max_group_depth) {
      Fail(open, fmt::format("groups nested deeper than {}", limits_.max_group_depth));
      return 0;
    }
    ++pos_;
    SkipSpace(true);
    const uint32_t id = NewGeneratedRule(RuleDef::kGroup, open);
    auto alternatives = ParseAlternatives(true, depth + 1);
    if (!ok()) return id;
    if (Peek() != ')') {
      Fail(pos_, fmt::format("expected ')' to close the group opened at {}, found {}",
                             LineColumn(text_, open), Here()));
      return id;
    }
    ++pos_;
    rs_.rules[id].alternatives = std::move(alternatives);
    return id;
  }

  void ParseLiteral(std::vector<Symbol>* seq) {
    const size_t open = pos_++;
    while (ok()) {
      if (AtEnd()) {
        Fail(open, "unterminated string literal");
        return;
      }
      if (Peek() == '"') break;
      const size_t at = pos_;
      const uint32_t cp = ParseChar();
      if (!ok()) return;
      seq->push_back({Symbol::kClass, InternClass(CodePointSet::Single(cp))});
      CountSymbols(1, at);
    }
    ++pos_;
  }

  uint32_t ParseClass() {
    const size_t open = pos_++;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    while (ok()) {
      if (AtEnd()) {
        Fail(open, "unterminated character class");
        return 0;
      }
      if (Peek() == ']') break;
      const size_t at = pos_;
      const uint32_t lo = ParseChar();
      uint32_t hi = lo;
      if (ok() && Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        hi = ParseChar();
        if (ok() && hi < lo) {
          Fail(at, fmt::format("character range U+{:04X}-U+{:04X} ends before it starts", lo, hi));
        }
      }
      ranges.push_back({lo, hi});
    }
    if (!ok()) return 0;
    ++pos_;
    CodePointSet set(std::move(ranges));
    if (negated) set = set.Complement();
    if (set.empty()) {
      Fail(open, "character class matches no character");
      return 0;
    }
    return InternClass(std::move(set));
  }

  // One character of a literal or class: an escape or a UTF-8 character.
  uint32_t ParseChar() {
    const size_t at = pos_;
    if (Peek() != '\\') {
      uint32_t cp = 0;
      if (!DecodeUtf8(text_, &pos_, &cp)) Fail(at, "invalid UTF-8");
      return cp;
    }
    const char e = Peek(1);
    pos_ += 2;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '[': case ']': case '-':
        return static_cast<uint8_t>(e);
      case 'x': return ParseHex(2, at);
      case 'u': return ParseHex(4, at);
      case 'U': return ParseHex(8, at);
      default:
        pos_ = at;
        Fail(at, e == '\0' && pos_ + 1 >= text_.size() ? std::string("unexpected end after '\\'")
                                                        : fmt::format("unknown escape '\\{}'", e));
        return 0;
    }
  }

  uint32_t ParseHex(int digits, size_t escape_at) {
    uint64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = HexValue(Peek());
      if (h < 0) {
        Fail(escape_at, fmt::format("expected {} hex digits after '\\{}'", digits, text_[escape_at + 1]));
        return 0;
      }
      v = v * 16 + h;
      ++pos_;
    }
    if (!IsScalarValue(static_cast<uint32_t>(v)) || v > kMaxCodePoint) {
      Fail(escape_at, fmt::format("U+{:X} is not a Unicode scalar value", v));
      return 0;
    }
    return static_cast<uint32_t>(v);
  }

  // {m} {m,} {m,n}, with optional spaces inside.
  void ParseBraces(std::vector<Symbol>* seq, size_t last_start) {
    const size_t open = pos_++;
    SkipSpace(false);
    uint32_t min = 0, max = 0;
    if (!ParseCount(&min)) return;
    SkipSpace(false);
    if (Peek() == '}') {
      max = min;
    } else if (Peek() == ',') {
      ++pos_;
      SkipSpace(false);
      max = kUnbounded;
      if (Peek() >= '0' && Peek() <= '9' && !ParseCount(&max)) return;
      SkipSpace(false);
      if (Peek() != '}') {
        Fail(pos_, fmt::format("expected '}}' to close the repetition, found {}", Here()));
        return;
      }
    } else {
      Fail(pos_, fmt::format("expected ',' or '}}' in the repetition, found {}", Here()));
      return;
    }
    ++pos_;
    if (max != kUnbounded && max < min) {
      Fail(open, fmt::format("repetition {{{},{}}} has its maximum below its minimum", min, max));
      return;
    }
    Repeat(seq, last_start, min, max, open);
  }

  bool ParseCount(uint32_t* out) {
    if (!(Peek() >= '0' && Peek() <= '9')) {
      Fail(pos_, fmt::format("expected a number in the repetition, found {}", Here()));
      return false;
    }
    const size_t at = pos_;
    uint64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      ++pos_;
      if (v > limits_.max_repetition) {
        Fail(at, fmt::format("repetition count too large (the limit is {})", limits_.max_repetition));
        return false;
      }
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }

  // Rewrites seq[last_start..] (the item) repeated min..max times (max kUnbounded = no limit):
  //   x{m,n} -> x .. x (m times) O_(n-m), O_k ::= x O_(k-1) | (empty), O_1 ::= x | (empty)
  //   x{m,}  -> x .. x (m times) S,       S   ::= x S | (empty)
  void Repeat(std::vector<Symbol>* seq, size_t last_start, uint32_t min, uint32_t max, size_t op) {
    if (last_start == kNone || last_start > seq->size()) {
      Fail(op, fmt::format("'{}' has nothing before it to repeat", text_[op]));
      return;
    }
    std::vector<Symbol> item(seq->begin() + last_start, seq->end());
    seq->resize(last_start);
    if (item.empty()) return;  // "" repeated is still ""
    if (item.size() > 1) {     // a literal of several characters: one rule, referenced each time
      const uint32_t id = NewGeneratedRule(RuleDef::kGroup, op);
      rs_.rules[id].alternatives = {item};
      item = {{Symbol::kRule, id}};
    }
    const uint64_t copies = max == kUnbounded ? uint64_t{min} + 1 : max;
    CountSymbols(copies * 2, op);
    if (!ok()) return;
    for (uint32_t i = 0; i < min; ++i) seq->push_back(item[0]);
    if (max == kUnbounded) {
      const uint32_t star = NewGeneratedRule(RuleDef::kRepetition, op);
      rs_.rules[star].alternatives = {{item[0], {Symbol::kRule, star}}, {}};
      seq->push_back({Symbol::kRule, star});
      return;
    }
    uint32_t prev = 0;
    for (uint32_t k = 1; k <= max - min && ok(); ++k) {
      const uint32_t opt = NewGeneratedRule(RuleDef::kRepetition, op);
      std::vector<Symbol> first = {item[0]};
      if (k > 1) first.push_back({Symbol::kRule, prev});
      rs_.rules[opt].alternatives = {std::move(first), {}};
      prev = opt;
    }
    if (max > min) seq->push_back({Symbol::kRule, prev});
  }

  std::string_view text_;
  const GrammarLimits& limits_;
  WorkMeter* meter_;
  size_t pos_ = 0;
  size_t symbols_ = 0;
  common::Status status_;
  RuleSet rs_;
  std::unordered_map<std::string, uint32_t> names_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_ids_;
};

}  // namespace

common::StatusOr<RuleSet> ParseGbnf(std::string_view text, const GrammarLimits& limits) {
  WorkMeter meter = GrammarCompileMeter(limits, text.size());
  return ParseGbnf(text, limits, &meter);
}

common::StatusOr<RuleSet> ParseGbnf(std::string_view text, const GrammarLimits& limits, WorkMeter* meter) {
  return GbnfParser(text, limits, meter).Parse();
}

}  // namespace niels::daemon::grammar
