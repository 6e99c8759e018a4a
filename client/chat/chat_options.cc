#include "client/chat/chat_options.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/chat/render.h"
#include "common/bounded_json.h"

namespace niels::client {
namespace {

namespace fs = std::filesystem;

constexpr int kUsageExitCode = 2;

// The directory a model path stands for: a file stands for the directory holding it.
fs::path ModelDir(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (fs::is_regular_file(p, ec)) p = p.parent_path();
  return p;
}

}  // namespace

std::variant<ChatOptions, int> ParseChatFlags(int argc, const char* const* argv, std::ostream& out,
                                              std::ostream& err) {
  ChatOptions o;
  CLI::App app{"niels-chat: chat with the model served by nielsd (a local inference daemon).",
               "niels-chat"};
  app.set_version_flag("--version", std::string("niels-chat ") + NIELSD_VERSION);
  app.add_option("--socket", o.socket,
                 "nielsd socket (default: $NIELSD_SOCKET, $XDG_RUNTIME_DIR/nielsd/nielsd.sock, "
                 "/run/nielsd/nielsd.sock)");
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate at most per reply")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--temperature", o.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens (0 = off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", o.top_p, "nucleus sampling probability (0 = off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  float repetition_penalty = 1.0f;
  CLI::Option* rep = app.add_option("--repetition-penalty", repetition_penalty,
                                    "penalty for tokens already in the chat (1 = off)")
                         ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "sampling seed")->capture_default_str();
  std::string system_text;
  CLI::Option* sys = app.add_option("--system", system_text, "system prompt text");
  CLI::Option* sys_file =
      app.add_option("--system-file", o.system_file, "read the system prompt from a UTF-8 file (wins over --system)");
  CLI::Option* session = app.add_option("--session", o.session,
                                        "continue session ID (its own system prompt; see /session or --stats)");
  CLI::Option* resume = app.add_flag("--resume", o.resume,
                                     "continue your most recent conversation with the same system prompt");
  session->excludes(sys)->excludes(sys_file)->excludes(resume);
  bool no_kv_cache = false;
  app.add_flag("--no-kv-cache", no_kv_cache, "run the uncached generation path for every turn");
  app.add_flag("--greedy", o.greedy, "greedy decoding (temperature 0)");
  app.add_option("--ckpt", o.ckpt, "check that nielsd serves this model (directory, file in it, or name)");
  app.add_flag("--stream", o.stream, "print tokens as they are generated");
  std::string prompt;
  CLI::Option* one_shot = app.add_option("-p,--prompt", prompt, "one-shot: answer TEXT and exit");
  app.add_flag("--stats,--verbose", o.stats, "print each reply's generation stats on stderr");
  app.add_flag("--show-logprobs", o.show_logprobs,
               "print each reply token's logprob and its best alternatives on stderr (dimmed on a terminal)");
  app.add_flag("--hide-reasoning", o.hide_reasoning,
               "do not print a reasoning model's reasoning (shown dimmed by default), only its answer");
  bool think = false;
  bool no_think = false;
  CLI::Option* think_flag =
      app.add_flag("--think", think, "ask the model to reason first (the chat template's enable_thinking, Qwen3)");
  CLI::Option* no_think_flag =
      app.add_flag("--no-think", no_think, "ask the model to answer without reasoning (enable_thinking false)");
  think_flag->excludes(no_think_flag);
  CLI::Option* schema = app.add_option("--json-schema", o.json_schema_file,
                                       "every reply is JSON valid under the JSON Schema in FILE");
  CLI::Option* grammar = app.add_option("--grammar", o.grammar_file,
                                        "every reply follows the GBNF grammar in FILE (llama.cpp syntax, start rule root)");
  CLI::Option* any_json = app.add_flag("--json", o.any_json, "every reply is a JSON value");
  CLI::Option* tools_flag = app.add_option("--tools", o.tools_file,
                 "give the model the tools of FILE (OpenAI-style tools JSON); each call is shown and its result read "
                 "from input");
  CLI::Option* tool_exec = app.add_option(
      "--tool-exec", o.tool_exec,
      "answer each tool call by running CMD with /bin/sh: the call's arguments (JSON) on its stdin, "
      "NIELS_TOOL_NAME and NIELS_TOOL_CALL_ID in its environment, its stdout sent back as the result");
  tool_exec->needs(tools_flag);
  tool_exec->type_name("CMD");
  app.add_option("--tool-choice", o.tool_choice,
                 "auto (the default), none, required, or a tool's name: what the first reply of each turn must do "
                 "(replies after tool results choose for themselves)")
      ->type_name("CHOICE")
      ->needs(tools_flag);
  schema->excludes(grammar)->excludes(any_json);
  grammar->excludes(any_json);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : kUsageExitCode;
  }
  if (rep->count() > 0) o.repetition_penalty = repetition_penalty;
  if (sys->count() > 0) o.system_text = system_text;
  if (one_shot->count() > 0) o.prompt = prompt;
  if (think_flag->count() > 0) o.enable_thinking = true;
  if (no_think_flag->count() > 0) o.enable_thinking = false;
  o.use_kv_cache = !no_kv_cache;
  return o;
}

namespace {

// A UTF-8 text file's contents, as is.
common::StatusOr<std::string> ReadTextFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::Status::InvalidArgument(fmt::format("cannot read {} {}", flag, path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!IsValidUtf8(contents.str())) {
    return common::Status::InvalidArgument(fmt::format("{} {} is not valid UTF-8", flag, path));
  }
  return contents.str();
}

}  // namespace

common::StatusOr<std::optional<niels::v1::Constraint>> ResolveConstraint(const ChatOptions& options) {
  niels::v1::Constraint constraint;
  if (!options.json_schema_file.empty()) {
    auto text = ReadTextFile(options.json_schema_file, "--json-schema");
    if (!text.ok()) return text.status();
    constraint.set_json_schema(std::move(text).value());
  } else if (!options.grammar_file.empty()) {
    auto text = ReadTextFile(options.grammar_file, "--grammar");
    if (!text.ok()) return text.status();
    constraint.set_gbnf(std::move(text).value());
  } else if (options.any_json) {
    constraint.mutable_any_json();
  } else {
    return std::optional<niels::v1::Constraint>();
  }
  return std::optional<niels::v1::Constraint>(std::move(constraint));
}

common::StatusOr<niels::v1::ToolSet> ParseOpenAiTools(const std::string& json_text, const std::string& source) {
  common::StatusOr<nlohmann::json> parsed = common::ParseJsonBounded(json_text, source);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_array()) return common::Status::InvalidArgument(source + ": not a JSON array of tools");
  niels::v1::ToolSet tools;
  for (size_t i = 0; i < parsed->size(); ++i) {
    const nlohmann::json& entry = (*parsed)[i];
    const std::string where = source + ": tool " + std::to_string(i);
    if (!entry.is_object()) return common::Status::InvalidArgument(where + " is not an object");
    const nlohmann::json& function = entry.contains("function") ? entry["function"] : entry;
    if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
      return common::Status::InvalidArgument(where + " has no function name");
    }
    niels::v1::Tool& tool = *tools.add_tools();
    tool.set_name(function["name"].get<std::string>());
    if (function.contains("description") && function["description"].is_string()) {
      tool.set_description(function["description"].get<std::string>());
    }
    if (function.contains("parameters") && !function["parameters"].is_null()) {
      tool.set_parameters(function["parameters"].dump());
    }
  }
  return tools;
}

common::StatusOr<std::optional<niels::v1::ToolSet>> ResolveTools(const ChatOptions& options) {
  if (options.tools_file.empty()) return std::optional<niels::v1::ToolSet>();
  auto text = ReadTextFile(options.tools_file, "--tools");
  if (!text.ok()) return text.status();
  auto tools = ParseOpenAiTools(*text, "--tools " + options.tools_file);
  if (!tools.ok()) return tools.status();
  return std::optional<niels::v1::ToolSet>(std::move(tools).value());
}

common::StatusOr<std::string> ResolveSystemPrompt(const ChatOptions& options) {
  if (!options.system_file.empty()) {
    std::ifstream in(options.system_file, std::ios::binary);
    if (!in) return common::Status::InvalidArgument("cannot read --system-file " + options.system_file);
    std::ostringstream contents;
    contents << in.rdbuf();
    std::string text = contents.str();
    if (text.ends_with("\r\n")) {
      text.resize(text.size() - 2);
    } else if (text.ends_with('\n')) {
      text.pop_back();
    }
    if (!IsValidUtf8(text)) {
      return common::Status::InvalidArgument("--system-file " + options.system_file + " is not valid UTF-8");
    }
    return text;
  }
  if (options.system_text) return *options.system_text;
  return std::string(common::kDefaultSystemPrompt);
}

niels::v1::ChatRequest BuildChatRequest(const ChatOptions& options, const std::string& session_id,
                                        const std::string& user_text) {
  niels::v1::ChatRequest request;
  request.set_session_id(session_id);
  request.set_user_text(user_text);
  niels::v1::Sampling* s = request.mutable_sampling();
  s->set_temperature(options.greedy ? 0.0f : options.temperature);
  s->set_top_k(options.top_k);
  s->set_top_p(options.top_p);
  if (options.repetition_penalty) s->set_repetition_penalty(*options.repetition_penalty);
  s->set_seed(options.seed);
  request.set_max_new_tokens(options.max_new_tokens);
  if (!options.use_kv_cache) request.set_use_kv_cache(false);
  request.set_stream(options.stream);
  if (options.show_logprobs) {
    request.set_want_logprobs(true);
    request.set_top_logprobs(kShownAlternatives);
  }
  if (options.enable_thinking) request.set_enable_thinking(*options.enable_thinking);
  if (options.constraint) *request.mutable_constraint() = *options.constraint;
  if (options.tools) *request.mutable_tools() = *options.tools;
  if (options.tool_choice == "none") {
    request.mutable_tool_choice()->set_mode(niels::v1::ToolChoice::NONE);
  } else if (options.tool_choice == "required") {
    request.mutable_tool_choice()->set_mode(niels::v1::ToolChoice::REQUIRED);
  } else if (!options.tool_choice.empty() && options.tool_choice != "auto") {
    request.mutable_tool_choice()->set_mode(niels::v1::ToolChoice::NAMED);
    request.mutable_tool_choice()->set_name(options.tool_choice);
  }
  return request;
}

bool CkptMatchesModel(const std::string& ckpt, const niels::v1::InfoResponse& info) {
  if (ckpt.empty()) return true;
  if (!info.model_name().empty() && ckpt == info.model_name()) return true;
  if (info.model_path().empty()) return false;
  return ModelDir(ckpt) == ModelDir(info.model_path());
}

namespace {

// A token's bytes for a logprobs line: quoted, with quotes, backslashes and control bytes escaped
// (bytes of a partial UTF-8 character as \xNN, so the line stays valid text).
std::string QuotedBytes(const std::string& bytes) {
  std::string out = "'";
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c >= 0x80) {
      // A whole UTF-8 character is kept; a lone or cut one is escaped byte by byte.
      const size_t length = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
      const std::string_view character(bytes.data() + i, std::min(length, bytes.size() - i));
      if (length > 1 && character.size() == length && IsValidUtf8(character)) {
        out += character;
        i += length - 1;
      } else {
        out += fmt::format("\\x{:02x}", c);
      }
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

}  // namespace

std::string FormatLogprobs(const niels::v1::ChatResponse& response, bool faint) {
  std::string out;
  for (const niels::v1::StepInfo& step : response.steps()) {
    std::string line = fmt::format("  {} {:.3f}", QuotedBytes(step.text_bytes()), step.logprob());
    for (const niels::v1::TokenAlternative& alternative : step.top()) {
      line += fmt::format("  | {} {:.3f}", QuotedBytes(alternative.text_bytes()), alternative.logprob());
    }
    out += faint ? "\x1b[2m" + line + "\x1b[22m\n" : line + "\n";
  }
  return out;
}

std::string FormatStats(const niels::v1::ChatResponse& response, const std::string& session_id) {
  const niels::v1::GenerationStats& s = response.stats();
  return fmt::format(
      "prompt_tokens={} reused_tokens={} prefilled_tokens={} generated_tokens={} used_kv_cache={} "
      "ttft_ms={:.2f} decode_tok_s={:.1f} queue_ms={:.2f} truncated_turns={} stop_reason={} "
      "session_length={} session={}",
      s.prompt_tokens(), s.reused_tokens(), s.prefilled_tokens(), s.generated_tokens(),
      s.used_kv_cache() ? "true" : "false", s.time_to_first_token_ms(), s.decode_tokens_per_s(),
      s.queue_ms(), response.truncated_turns(), niels::v1::StopReason_Name(response.stop_reason()),
      response.session_length(), session_id);
}

std::string PickResumeSession(const niels::v1::ListSessionsResponse& sessions, const std::string& system_prompt) {
  const niels::v1::SessionInfo* best = nullptr;
  for (const niels::v1::SessionInfo& info : sessions.sessions()) {
    if (info.other_model() || !info.has_system_prompt() || info.system_prompt_text() != system_prompt) continue;
    if (best == nullptr || info.last_used_unix_s() > best->last_used_unix_s()) best = &info;
  }
  return best == nullptr ? "" : best->session_id();
}

}  // namespace niels::client
