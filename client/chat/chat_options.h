#pragma once
// niels-chat's command line (docs/ARCHITECTURE.md "niels-chat") and the pure functions built on it:
// the system prompt precedence, the ChatRequest sent per turn and the --ckpt model check. No I/O
// apart from reading --system-file and resolving paths; thread-compatible.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <variant>

#include "common/defaults.h"
#include "common/status.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::client {

// Everything niels-chat was asked to do. Defaults are the original CLI's.
struct ChatOptions {
  std::string socket;                       // --socket; "" = resolve by common/socket_path.h
  int32_t max_new_tokens = common::kDefaultMaxNewTokens;  // --max-new-tokens
  float temperature = common::kDefaultTemperature;        // --temperature; --greedy forces 0
  int32_t top_k = common::kDefaultTopK;                   // --top-k; 0 = off
  float top_p = common::kDefaultTopP;                     // --top-p; 0 = off
  std::optional<float> repetition_penalty;                // --repetition-penalty; unset = off
  uint64_t seed = common::kDefaultSeed;                   // --seed
  std::optional<std::string> system_text;   // --system TEXT
  std::string system_file;                  // --system-file PATH
  bool use_kv_cache = true;                 // false with --no-kv-cache
  bool greedy = false;                      // --greedy
  std::string ckpt;                         // --ckpt PATH; "" = no check
  bool stream = false;                      // --stream
  std::optional<std::string> prompt;        // -p/--prompt TEXT: one-shot
  bool stats = false;                       // --stats/--verbose: reply stats on stderr
  bool show_logprobs = false;               // --show-logprobs: per-token logprobs on stderr
  bool faint_logprobs = false;              // ... in the faint style (main: stderr is a terminal, no NO_COLOR)
  std::string session;                      // --session ID: continue that session
  bool resume = false;                      // --resume: continue the most recent one (same system prompt)
  bool hide_reasoning = false;              // --hide-reasoning: print only the answer of a reasoning model
  std::optional<bool> enable_thinking;      // --think / --no-think: the template's enable_thinking; unset = the model's default
  // Structured output: every reply follows a constraint (at most one of these three flags).
  std::string json_schema_file;             // --json-schema FILE: a JSON Schema
  std::string grammar_file;                 // --grammar FILE: a GBNF grammar
  bool any_json = false;                    // --json: any JSON value
  // The constraint sent with every turn (ResolveConstraint fills it from the three above).
  std::optional<niels::v1::Constraint> constraint;
  // Tools: --tools FILE, an OpenAI-style tools JSON; sent with every turn (ResolveTools fills
  // `tools`). Each call a reply makes is shown and its result read from the user.
  std::string tools_file;
  std::optional<niels::v1::ToolSet> tools;
  // --tool-exec CMD (with --tools): each call is answered by running CMD (tool_command.h) instead
  // of reading the result from the user.
  std::string tool_exec;
  // --tool-choice (with --tools): "auto" or empty, "none", "required", or a tool's name; sent with
  // the first request of each user turn (the requests that carry tool results go as auto).
  std::string tool_choice;
};

// Parses argv. Returns the options, or an exit code when the program should stop right away:
// 0 after --help/--version (text on `out`), 2 after a usage error (message on `err`).
std::variant<ChatOptions, int> ParseChatFlags(int argc, const char* const* argv, std::ostream& out,
                                              std::ostream& err);

// --system-file (its contents, one trailing newline removed) > --system > kDefaultSystemPrompt.
// INVALID_ARGUMENT naming the file when it cannot be read or is not valid UTF-8.
common::StatusOr<std::string> ResolveSystemPrompt(const ChatOptions& options);

// The constraint of --json-schema FILE (the file's text), --grammar FILE (the file's text) or --json;
// nullopt without them. INVALID_ARGUMENT naming the file when it cannot be read or is not valid
// UTF-8. (The daemon checks the schema or grammar itself, naming the line and column.)
common::StatusOr<std::optional<niels::v1::Constraint>> ResolveConstraint(const ChatOptions& options);

// The tools of an OpenAI-style tools JSON text: an array of {"type": "function", "function": {"name",
// "description", "parameters"}} (or of the bare function objects); parameters kept as JSON text.
// INVALID_ARGUMENT naming `source` and the entry otherwise. (The daemon checks names and schemas.)
common::StatusOr<niels::v1::ToolSet> ParseOpenAiTools(const std::string& json_text, const std::string& source);

// The tools of --tools FILE; nullopt without it. INVALID_ARGUMENT naming the file.
common::StatusOr<std::optional<niels::v1::ToolSet>> ResolveTools(const ChatOptions& options);

// The request for one turn: sampling from the options (greedy => temperature 0), max_new_tokens,
// use_kv_cache (only sent when false, so the daemon default applies otherwise), stream,
// enable_thinking (only when --think or --no-think was given), the constraint and the tools.
niels::v1::ChatRequest BuildChatRequest(const ChatOptions& options, const std::string& session_id,
                                        const std::string& user_text);

// Whether `ckpt` names the model the daemon serves: the model directory itself, a file inside it
// (e.g. its model.safetensors or config.json), or the model's name. Paths are compared after
// resolving symlinks and relative parts.
bool CkptMatchesModel(const std::string& ckpt, const niels::v1::InfoResponse& info);

// "prompt_tokens=.. reused_tokens=.. prefilled_tokens=.. generated_tokens=.. ... session=ID" for
// --stats.
std::string FormatStats(const niels::v1::ChatResponse& response, const std::string& session_id);

// The alternatives --show-logprobs asks for per token.
inline constexpr int32_t kShownAlternatives = 3;

// --show-logprobs: one line per reply token, "  'text' -0.123   | 'alt' -1.456 | ..." (the token's
// text bytes with control characters escaped, then its kShownAlternatives best alternatives, the
// model's own distribution), each line in the faint style (SGR 2 ... SGR 22) when `faint`.
std::string FormatLogprobs(const niels::v1::ChatResponse& response, bool faint);

// The session --resume continues: among `sessions` (the caller's, as ListSessions returns them) the
// most recently used one of this model whose system prompt is exactly `system_prompt`; "" when none.
std::string PickResumeSession(const niels::v1::ListSessionsResponse& sessions, const std::string& system_prompt);

}  // namespace niels::client
