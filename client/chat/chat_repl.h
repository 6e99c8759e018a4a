#pragma once
// ChatRepl: niels-chat's conversation loop over one DaemonClient and one daemon session
// (docs/ARCHITECTURE.md "niels-chat").
//
// - Terminal: prompt "> " with libedit line editing and a history file kept across runs
//   (history_file.h); empty lines are ignored; "/exit" or EOF (Ctrl-D) end cleanly (exit code 0);
//   Ctrl-C during a reply cancels that reply (the daemon restores the session as it was before the
//   turn) and returns to the prompt; Ctrl-C at the prompt exits with 130.
// - Lines (stdin not a terminal): no prompt; one reply per non-empty line; "/exit" or EOF end.
// - In both: lines starting with "/" are slash commands (slash_command.h), never model turns; their
//   feedback goes to `err`.
// - One-shot (-p): a single turn.
// Sessions (docs/ARCHITECTURE.md "niels-chat"): Start() creates one, Continue() attaches to an
// existing one (--session), Resume() to the most recent one with the same system prompt (--resume).
// With a durable daemon a conversation is kept when the REPL ends, /new or /system starts another:
// only a session this REPL created and that holds no completed turn (never used, or /reset) is
// deleted. With an ephemeral daemon (nielsd --ephemeral) the sessions it created are deleted, as
// they would not survive the daemon anyway and count against the user's session limit.
// Only reply text goes to `out`; diagnostics and --stats lines go to `err`.
//
// Exit codes: 0 ok, 1 a turn failed (its error printed; lines mode continues with the next
// line) or a constrained reply was cut before it was complete (CONSTRAINT_INCOMPLETE: the reply is
// printed, a note on `err`), 2 nielsd unreachable or the connection lost, 130 interrupted.
//
// Threading: single-threaded. InstallInterruptHandler() sets a process-wide SIGINT handler that
// talks to this REPL's client through an atomic pointer; at most one REPL per process uses it.

#include <cstdint>
#include <functional>
#include <optional>
#include <iosfwd>
#include <string>
#include <vector>

#include "client/chat/chat_options.h"
#include "client/chat/render.h"
#include "client/chat/slash_command.h"
#include "client/daemon_client.h"
#include "common/status.h"

namespace niels::client {

class HistoryFile;

inline constexpr int kExitOk = 0;
inline constexpr int kExitTurnFailed = 1;
inline constexpr int kExitUnreachable = 2;
inline constexpr int kExitInterrupted = 130;
// The most replies one user turn with tools makes (each after the previous one's tool results).
inline constexpr int kMaxToolRounds = 8;

// The one line printed when nielsd cannot be reached at `socket_path`: where it looked, why,
// and how to start it (a hint that fits the path: user unit, system unit, or --socket).
std::string UnreachableMessage(const std::string& socket_path, const common::Status& status,
                               bool from_flag);

class ChatRepl {
 public:
  // `client` must outlive the REPL.
  ChatRepl(DaemonClient* client, ChatOptions options, std::ostream& out, std::ostream& err);
  // Leaves the current session by the rule above (errors ignored: the daemon may be gone).
  ~ChatRepl();
  ChatRepl(const ChatRepl&) = delete;
  ChatRepl& operator=(const ChatRepl&) = delete;

  // Installs the SIGINT handler (no SA_RESTART) that cancels the reply in flight or marks the
  // prompt as interrupted. Call once, after the client is connected.
  void InstallInterruptHandler();

  // Whether the daemon keeps sessions across restarts (InfoResponse.durable_sessions); default
  // false (an older daemon): then the sessions this REPL created are deleted when left.
  void SetDurable(bool durable) { durable_ = durable; }

  // Tools (--tools): reads the result of a call the model made, after the call was shown on `err`;
  // nullopt (end of input) leaves the call unanswered and ends the turn.
  using ToolResultReader = std::function<std::optional<std::string>(const niels::v1::ToolCall& call)>;
  void SetToolResultReader(ToolResultReader reader) { tool_result_reader_ = std::move(reader); }
  // Whether Ctrl-C was pressed since the reader was called (for a reader that runs a command).
  static bool InterruptedOutsideReply();

  // How replies show a reasoning model's reasoning (render.h); default: hidden with
  // --hide-reasoning, else between <think> tags (main() dims it on a terminal).
  void SetReasoningDisplay(ReasoningDisplay display) { reasoning_display_ = display; }

  // Creates the daemon session with `system_prompt`. The daemon's error on failure.
  common::Status Start(const std::string& system_prompt);
  // Attaches to the existing session `session_id` (its system prompt comes with it). NOT_FOUND,
  // PERMISSION_DENIED, or INVALID_ARGUMENT when it belongs to another model.
  common::Status Continue(const std::string& session_id);
  // Continues the caller's most recent session with `system_prompt` (PickResumeSession), or starts
  // one when there is none (a note on `err`).
  common::Status Resume(const std::string& system_prompt);
  const std::string& session_id() const { return session_id_; }

  // One user turn: sends `text`, prints the reply (streamed with --stream) and, with --stats,
  // the stats line. With tools, each call the reply makes is shown on `err` ("[tool call NAME ARGS]")
  // and its result read (SetToolResultReader) and sent back as a tool message, and the model's
  // next reply printed, until a reply makes no call (at most kMaxToolRounds replies). OK,
  // CANCELLED after Ctrl-C (nothing more printed on `out`), or the error.
  common::Status Turn(const std::string& text);

  int RunOneShot(const std::string& prompt);
  int RunLines(std::istream& in);
  // `history_path`: the history file (DefaultHistoryPath); "" keeps history for this run only.
  int RunTerminal(const std::string& history_path);

 private:
  // The prompt loop of RunTerminal.
  int RunPrompt(HistoryFile& history);
  // Handles one input line. Returns -1 to continue, or an exit code.
  int HandleLine(const std::string& line, bool interactive);
  int ExitCodeFor(const common::Status& status);
  // Runs a slash command. Returns -1 to continue, or an exit code.
  int RunCommand(const SlashCommand& command);
  // Deletes the current session if this REPL created it and it is not worth keeping (see above);
  // returns whether it was kept.
  bool LeaveSession();
  // Switches to a fresh session with `system_prompt`, leaving the current one.
  common::Status StartOver(const std::string& system_prompt);
  // Sends one request and prints its reply (Turn); *answered_calls: the reply made tool calls and
  // every result was read (pending_results_ holds them).
  common::Status Reply(const niels::v1::ChatRequest& request, bool* answered_calls);
  // Drops the session's last turn (RewindSession) and returns the text of its user message; NOT_FOUND
  // when the conversation has no turn.
  common::StatusOr<std::string> DropLastTurn();

  DaemonClient* client_;
  ChatOptions options_;
  ReasoningDisplay reasoning_display_;
  std::ostream& out_;
  std::ostream& err_;
  std::string session_id_;
  std::string system_prompt_;
  bool owned_ = false;      // this REPL created the session
  int64_t turns_ = 0;       // completed turns the session holds
  bool durable_ = false;
  bool any_failed_ = false;
  ToolResultReader tool_result_reader_;
  std::vector<niels::v1::ChatMessage> pending_results_;
};

}  // namespace niels::client
