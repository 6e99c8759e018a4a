// Fuzz target: the grammar room (daemon/grammar) -- the GBNF parser, the JSON Schema compiler
// (with its pattern subset) and the matcher.
//
// Input: byte 0 picks the front end (bit 0 clear: GBNF, set: JSON Schema) and whether the grammar
// is embedded in one written around it (bit 1: CompiledGrammar::Around); bytes 1-2 (little endian) are
// the length of the grammar/schema text that follows; the rest is output fed to the matcher.
// Invariants: a refused grammar has an INVALID_ARGUMENT with a message; for an accepted one, at
// every 8th step AllowedBytes() agrees with what AcceptBytes takes, a token mask over a small
// vocabulary (every single byte, some multi-byte strings, an end token) equals advancing a copy by
// each token, IsComplete() <=> MinBytesToComplete() == 0, budgeted masks keep room to complete
// (CheckBudgetedMask), a limit ends in RESOURCE_EXHAUSTED
// (small limits keep each run fast), and the matcher's work and memory budgets hold
// (CheckMatcherBudget).
// Work budgets (rule_set.h): a compile refused for work is RESOURCE_EXHAUSTED naming its budget;
// an accepted one used at most a x input bytes + b units in each stage (the documented budgets:
// the schema stage for the schema's bytes, the GBNF stage for the GBNF's bytes), and the GBNF
// stage's count is linear in what it built: at most 8 x text bytes + 10 x (rules + elements).
#include <string>
#include <string_view>

#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/matcher.h"
#include "tests/fuzz/fuzz_util.h"

namespace grammar = niels::daemon::grammar;
using niels::common::StatusCode;

namespace {

const grammar::Vocabulary& SmallVocabulary() {
  static const auto* vocab = [] {
    std::vector<grammar::VocabularyToken> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), grammar::TokenKind::kText});
    for (const char* t : {"{\"", "\":", "\", \"", "true", "null", "ab", "\xc3\xa9", "\xe3\x81", "\x81\x82", "  ", "\n",
                          "\xf0\x9f\x98\x80", "12", "-1", "[{", "}]"}) {
      tokens.push_back({t, grammar::TokenKind::kText});
    }
    tokens.push_back({"", grammar::TokenKind::kEndOfOutput});
    tokens.push_back({"", grammar::TokenKind::kNever});
    return new std::shared_ptr<const grammar::Vocabulary>(*grammar::Vocabulary::Create(std::move(tokens)));
  }();
  return **vocab;
}

// Token windows the harness opened (each AcceptBytes call ends one: matcher_core.h).
uint64_t g_token_windows = 0;

// The matcher's budgets (matcher_core.h), from its own counters: no token's window goes past
// max_steps_per_token by more than the one charge that crossed it (at most a window's worth of
// stacks, or kMaxRunCheckRanges), so the whole run costs at most that per window opened; every
// transition computed was counted; the memory held passes its budget by at most one item (a state,
// a run set with its loop table, a mask of this small vocabulary); within the budgets the matcher
// is fine, past one it failed with RESOURCE_EXHAUSTED naming the budget.
void CheckMatcherBudget(const grammar::Matcher& m, const grammar::MatcherLimits& limits) {
  const grammar::MatcherStats s = m.stats();
  const uint64_t per_window = 2 * limits.max_steps_per_token + grammar::MatcherCore::kMaxRunCheckRanges + 1;
  FUZZ_CHECK(s.max_steps_in_a_token <= per_window);
  FUZZ_CHECK(s.steps <= (g_token_windows + 1) * per_window);
  FUZZ_CHECK(s.steps >= s.transitions);
  FUZZ_CHECK(s.peak_memory_bytes <= limits.max_memory_bytes + (size_t{1} << 20));
  if (s.max_steps_in_a_token > limits.max_steps_per_token) {
    FUZZ_CHECK(m.status().message().find("(budget matcher_steps_per_token)") != std::string::npos);
  } else if (s.peak_memory_bytes > limits.max_memory_bytes) {
    FUZZ_CHECK(m.status().message().find("(budget matcher_memory_bytes)") != std::string::npos);
  }
}

// Completion within a budget (matcher.h): the completion bound N is 0 exactly where the output is
// complete, at most the fewest bytes (every byte is a token here) and at least those bytes over the
// longest token; a budgeted mask is within the grammar's mask, and unless it is the fallback (the
// whole mask) every text id in it leaves N <= the budget after it.
void CheckBudgetedMask(grammar::Matcher& m, const grammar::TokenBitset& mask) {
  const grammar::Vocabulary& vocab = SmallVocabulary();
  const grammar::Matcher::Snapshot start = m.snapshot();
  const uint32_t n = m.CompletionBound(vocab);
  if (!m.status().ok()) return;
  const uint32_t bytes = m.MinBytesToComplete();
  FUZZ_CHECK((n == 0) == m.IsComplete());
  FUZZ_CHECK(n <= bytes);
  FUZZ_CHECK(uint64_t{n} * vocab.max_token_bytes() >= bytes);
  for (uint32_t k : {0u, 1u, 3u}) {
    grammar::TokenBitset within;
    bool narrowed = false;
    if (!m.AllowedTokensWithin(vocab, vocab, k, &within, &narrowed).ok()) return;
    for (int32_t id = 0; id < vocab.size(); ++id) FUZZ_CHECK(!within.Test(id) || mask.Test(id));
    FUZZ_CHECK(narrowed == (within != mask));
    if (!narrowed) continue;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (!within.Test(id) || vocab.token(id).kind != grammar::TokenKind::kText) continue;
      if (!m.AcceptBytes(vocab.token(id).bytes).ok()) return;
      ++g_token_windows;
      const uint32_t after = m.CompletionBound(vocab);
      m.Restore(start);
      if (!m.status().ok()) return;
      FUZZ_CHECK(after <= k);
    }
  }
}

void CheckMask(grammar::Matcher& m) {
  const grammar::Vocabulary& vocab = SmallVocabulary();
  grammar::TokenBitset mask;
  const auto status = m.AllowedTokens(vocab, &mask);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == StatusCode::kResourceExhausted);
    return;
  }
  const grammar::Matcher::Snapshot start = m.snapshot();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const grammar::VocabularyToken& t = vocab.token(id);
    bool ok = false;
    if (t.kind == grammar::TokenKind::kEndOfOutput) {
      ok = m.IsComplete();
    } else if (t.kind == grammar::TokenKind::kText) {
      ok = m.AcceptBytes(t.bytes).ok();
      ++g_token_windows;
      m.Restore(start);
    }
    if (!m.status().ok()) return;
    FUZZ_CHECK(mask.Test(id) == ok);
  }
  CheckBudgetedMask(m, mask);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t mode = in.U8();
  const bool schema = mode & 1;
  const bool around = mode & 2;
  const std::string_view text = in.Bytes(in.U16());
  const std::string_view output = in.Rest();

  grammar::GrammarLimits limits;
  limits.max_rules = 2000;
  limits.max_symbols = 10000;
  limits.max_repetition = 64;
  grammar::CompileWork work;
  auto g = schema ? grammar::CompileJsonSchema(text, limits, &work)
                  : grammar::CompiledGrammar::FromGbnf(text, limits, &work);
  if (!g.ok()) {
    const niels::common::Status status = g.status();
    if (status.code() == StatusCode::kResourceExhausted) {
      FUZZ_CHECK(status.message().find("work budget exhausted") != std::string::npos);
      FUZZ_CHECK(work.schema_units > work.schema_budget || work.grammar_units > work.grammar_budget);
    } else {
      FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument && !status.message().empty());
    }
    return 0;
  }
  const grammar::CompiledGrammar& compiled = **g;
  const uint64_t gbnf_bytes = compiled.source().size();
  if (schema) {
    FUZZ_CHECK(work.schema_units <= limits.schema_work_per_byte * text.size() + limits.schema_work_base);
  }
  FUZZ_CHECK(work.grammar_units <= limits.grammar_work_per_byte * gbnf_bytes + limits.grammar_work_base);
  FUZZ_CHECK(work.grammar_units <= 8 * gbnf_bytes + 10 * (compiled.rule_count() + compiled.elements().size()));
  if (around) {
    // The grammar embedded as compiled in one written around it (an optional block before it):
    // an accepted grammar always embeds, unless the two together pass a size limit or budget.
    auto wrapped = grammar::CompiledGrammar::Around("root ::= \"<t>\" [^<]* \"</t>\" inner | inner\ninner ::= \"x\"\n",
                                                    "inner", compiled, limits);
    if (!wrapped.ok()) {
      FUZZ_CHECK(wrapped.status().code() == StatusCode::kResourceExhausted ||
                 wrapped.status().message().find("too large") != std::string::npos);
      return 0;
    }
    FUZZ_CHECK((*wrapped)->rule_count() > compiled.rule_count());
    g = std::move(wrapped);
  }
  grammar::MatcherLimits matcher_limits;
  matcher_limits.max_frames = 20000;
  matcher_limits.max_states = 1000;
  matcher_limits.max_stacks_per_state = 500;
  matcher_limits.max_stack_depth = 200;
  matcher_limits.max_steps_per_token = 20000;
  matcher_limits.max_memory_bytes = size_t{4} << 20;
  g_token_windows = 0;
  grammar::Matcher m(*g, matcher_limits);
  if (!m.status().ok()) {
    FUZZ_CHECK(m.status().code() == StatusCode::kResourceExhausted);
    return 0;
  }
  CheckMask(m);
  // Every 8th position the whole AllowedBytes() set is checked (it builds up to 256 transitions);
  // at the others the byte taken must be accepted iff the matcher said so one byte earlier.
  for (size_t i = 0; i < output.size() && i < 128 && m.status().ok(); ++i) {
    FUZZ_CHECK(m.IsComplete() == (m.MinBytesToComplete() == 0));
    const auto b = static_cast<uint8_t>(output[i]);
    bool expected = true;
    if (i % 8 == 0) {
      const std::bitset<256> allowed = m.AllowedBytes();
      if (!m.status().ok()) break;
      expected = allowed[b];
    }
    const auto status = m.AcceptBytes(std::string_view(&output[i], 1));
    ++g_token_windows;
    if (!m.status().ok()) break;
    if (i % 8 == 0) FUZZ_CHECK(status.ok() == expected);
    if (!status.ok()) break;
    if (i % 32 == 31) CheckMask(m);
  }
  if (!m.status().ok()) FUZZ_CHECK(m.status().code() == StatusCode::kResourceExhausted);
  CheckMatcherBudget(m, matcher_limits);
  return 0;
}
