#include "client/chat/chat_repl.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <istream>
#include <ostream>

#include <editline/readline.h>

#include "client/chat/history_file.h"
#include "client/chat/render.h"
#include "client/chat/slash_command.h"
#include "common/socket_path.h"

namespace niels::client {
namespace {

// SIGINT state shared with the handler; trivially destructible, lock-free.
std::atomic<DaemonClient*> g_interrupt_client{nullptr};
volatile std::sig_atomic_t g_in_reply = 0;
volatile std::sig_atomic_t g_interrupted = 0;

void OnSigint(int) {
  if (g_in_reply) {
    if (DaemonClient* client = g_interrupt_client.load()) client->RequestCancel();
  } else {
    g_interrupted = 1;
  }
}

constexpr int kContinue = -1;

}  // namespace

std::string UnreachableMessage(const std::string& socket_path, const common::Status& status,
                               bool from_flag) {
  std::string why = status.message();
  const std::string prefix = "cannot reach nielsd at " + socket_path + " ";
  if (why.starts_with(prefix)) why = why.substr(prefix.size());  // keep "(reason)"
  else why = "(" + why + ")";
  std::string hint;
  if (from_flag) {
    hint = "start it with `nielsd --socket " + socket_path + " &`";
  } else if (socket_path == common::kSystemSocketPath) {
    hint = "start it with `systemctl start nielsd.socket` (system) or `nielsd &`";
  } else {
    hint = "start it with `nielsd &` or `systemctl --user start nielsd.socket`";
  }
  return "niels-chat: cannot reach nielsd at " + socket_path + " " + why + "; " + hint;
}

bool ChatRepl::InterruptedOutsideReply() { return g_interrupted != 0; }

ChatRepl::ChatRepl(DaemonClient* client, ChatOptions options, std::ostream& out, std::ostream& err)
    : client_(client),
      options_(std::move(options)),
      reasoning_display_(ChooseReasoningDisplay(options_.hide_reasoning, /*stdout_is_terminal=*/false, nullptr)),
      out_(out),
      err_(err) {}

ChatRepl::~ChatRepl() {
  LeaveSession();
  DaemonClient* self = client_;
  g_interrupt_client.compare_exchange_strong(self, nullptr);
}

void ChatRepl::InstallInterruptHandler() {
  g_interrupt_client.store(client_);
  struct sigaction action {};
  action.sa_handler = OnSigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking read at the prompt returns EINTR
  sigaction(SIGINT, &action, nullptr);
}

common::Status ChatRepl::Start(const std::string& system_prompt) {
  auto created = client_->CreateSession(system_prompt);
  if (!created.ok()) return created.status();
  session_id_ = created->session_id();
  system_prompt_ = system_prompt;
  owned_ = true;
  turns_ = 0;
  return common::Status::Ok();
}

common::Status ChatRepl::Continue(const std::string& session_id) {
  auto got = client_->GetSession(session_id);
  if (!got.ok()) return got.status();
  const v1::SessionInfo& info = got->session();
  if (info.other_model()) {
    return common::Status::InvalidArgument("session " + session_id + " belongs to another model (" +
                                           info.model_name() + ") than the one nielsd serves");
  }
  session_id_ = session_id;
  system_prompt_ = info.system_prompt_text();
  owned_ = false;
  turns_ = info.turns();
  return common::Status::Ok();
}

common::Status ChatRepl::Resume(const std::string& system_prompt) {
  auto listed = client_->ListSessions();
  if (!listed.ok()) return listed.status();
  const std::string id = PickResumeSession(*listed, system_prompt);
  if (!id.empty()) return Continue(id);
  err_ << "niels-chat: no earlier conversation with this system prompt; starting a new one" << std::endl;
  return Start(system_prompt);
}

bool ChatRepl::LeaveSession() {
  if (session_id_.empty()) return false;
  const bool keep = !owned_ || (durable_ && turns_ > 0);
  if (!keep) (void)client_->DeleteSession(session_id_);
  session_id_.clear();
  return keep;
}

common::Status ChatRepl::StartOver(const std::string& system_prompt) {
  auto created = client_->CreateSession(system_prompt);
  if (!created.ok()) return created.status();
  const std::string previous = session_id_;
  if (LeaveSession() && durable_) {
    err_ << "niels-chat: the previous conversation is kept as session " << previous << std::endl;
  }
  session_id_ = created->session_id();
  system_prompt_ = system_prompt;
  owned_ = true;
  turns_ = 0;
  return common::Status::Ok();
}

common::StatusOr<std::string> ChatRepl::DropLastTurn() {
  auto session = client_->GetSession(session_id_);
  if (!session.ok()) return session.status();
  const auto& messages = session->messages();
  const int first = !messages.empty() && messages[0].role() == "system" ? 1 : 0;
  // The last turn starts at the last user message (after it: the reply, tool calls and results).
  int last_user = messages.size() - 1;
  while (last_user >= first && messages[last_user].role() != "user") --last_user;
  if (last_user < first || last_user + 1 >= messages.size()) {
    return common::Status::NotFound("the conversation has no turn yet");
  }
  std::string user_text = messages[last_user].content();
  auto rewound = client_->RewindSession(session_id_, last_user - first);
  if (!rewound.ok()) return rewound.status();
  if (turns_ > 0) --turns_;
  return user_text;
}

int ChatRepl::RunCommand(const SlashCommand& command) {
  using Kind = SlashCommand::Kind;
  switch (command.kind) {
    case Kind::kTurn:
      break;
    case Kind::kExit:
      return kExitOk;
    case Kind::kHelp:
      err_ << SlashCommandHelp() << std::flush;
      break;
    case Kind::kUnknown:
      err_ << UnknownCommandMessage(command.argument) << std::endl;
      break;
    case Kind::kStats:
      options_.stats = !options_.stats;
      err_ << "niels-chat: stats " << (options_.stats ? "on" : "off") << std::endl;
      break;
    case Kind::kReset: {
      auto reset = client_->ResetSession(session_id_);
      if (!reset.ok()) return ExitCodeFor(reset.status());
      turns_ = 0;
      err_ << "niels-chat: conversation cleared (system prompt kept)" << std::endl;
      break;
    }
    case Kind::kRetry:
    case Kind::kUndo:
    case Kind::kEdit: {
      if (command.kind == Kind::kEdit && command.argument.empty()) {
        err_ << "niels-chat: /edit TEXT replaces your last message with TEXT" << std::endl;
        break;
      }
      if (command.kind == Kind::kEdit && !IsValidUtf8(command.argument)) {
        err_ << "niels-chat: the text is not valid UTF-8; nothing changed" << std::endl;
        break;
      }
      common::StatusOr<std::string> last = DropLastTurn();
      if (!last.ok()) {
        if (last.status().code() == common::StatusCode::kNotFound) {
          err_ << "niels-chat: " << last.status().message() << std::endl;
          break;
        }
        return ExitCodeFor(last.status());
      }
      if (command.kind == Kind::kUndo) {
        err_ << "niels-chat: last turn undone" << std::endl;
        break;
      }
      const common::Status status = Turn(command.kind == Kind::kEdit ? command.argument : *last);
      if (!status.ok()) return ExitCodeFor(status);
      break;
    }
    case Kind::kNew: {
      if (common::Status started = StartOver(system_prompt_); !started.ok()) return ExitCodeFor(started);
      err_ << "niels-chat: new conversation (session " << session_id_ << ")" << std::endl;
      break;
    }
    case Kind::kSession:
      err_ << "niels-chat: session " << session_id_ << " (" << turns_ << " turn" << (turns_ == 1 ? "" : "s")
           << "; continue it later with niels-chat --session " << session_id_ << ")" << std::endl;
      break;
    case Kind::kSystem: {
      if (command.argument.empty()) {
        err_ << "niels-chat: system prompt: " << system_prompt_ << std::endl;
        break;
      }
      if (!IsValidUtf8(command.argument)) {
        err_ << "niels-chat: the system prompt is not valid UTF-8; unchanged" << std::endl;
        break;
      }
      // The protocol has no "replace the system prompt": start a new session with it.
      if (common::Status started = StartOver(command.argument); !started.ok()) return ExitCodeFor(started);
      err_ << "niels-chat: new system prompt; new conversation" << std::endl;
      break;
    }
  }
  return kContinue;
}

common::Status ChatRepl::Turn(const std::string& text) {
  niels::v1::ChatRequest request = BuildChatRequest(options_, session_id_, text);
  for (int round = 0; round < kMaxToolRounds; ++round) {
    bool answered = false;
    NIELS_RETURN_IF_ERROR(Reply(request, &answered));
    if (!answered) break;
    // The tool results go back as the next request's messages.
    // --tool-choice applies to the first reply of a user turn; the ones after results choose.
    request = BuildChatRequest(options_, session_id_, "");
    request.clear_tool_choice();
    for (const niels::v1::ChatMessage& result : pending_results_) *request.add_messages() = result;
    pending_results_.clear();
  }
  return common::Status::Ok();
}

common::Status ChatRepl::Reply(const niels::v1::ChatRequest& request, bool* answered_calls) {
  *answered_calls = false;
  ReplyPrinter printer(out_, options_.stream, reasoning_display_);
  client_->ClearCancelRequest();
  g_in_reply = 1;
  auto reply = client_->Chat(request, [&](const niels::v1::TokenEvent& e) { printer.OnToken(e); });
  g_in_reply = 0;
  if (!reply.ok()) {
    printer.Abort();
    return reply.status();
  }
  printer.Finish(reply->reply(), reply->reasoning());
  ++turns_;
  if (reply->tool_calls_size() > 0 && tool_result_reader_) {
    for (const niels::v1::ToolCall& call : reply->tool_calls()) {
      err_ << "[tool call " << call.name() << " " << call.arguments() << " (id " << call.id() << ")]" << std::endl;
      g_interrupted = 0;
      std::optional<std::string> result = tool_result_reader_(call);
      if (!result) {
        pending_results_.clear();
        return common::Status::Ok();
      }
      niels::v1::ChatMessage& message = pending_results_.emplace_back();
      message.set_role("tool");
      message.set_content(*result);
      message.set_tool_call_id(call.id());
      message.set_name(call.name());
    }
    *answered_calls = true;
  }
  if (reply->stop_reason() == niels::v1::CONSTRAINT_INCOMPLETE) {
    err_ << "niels-chat: the reply was cut by --max-new-tokens (or the context) before it was complete: "
            "it does not follow the constraint"
         << std::endl;
    any_failed_ = true;
  }
  if (options_.show_logprobs) err_ << FormatLogprobs(*reply, options_.faint_logprobs) << std::flush;
  if (options_.stats) {
    err_ << "niels-chat: stats: " << FormatStats(*reply, session_id_) << std::endl;
  } else if (reply->truncated_turns() > 0) {
    err_ << "niels-chat: dropped the " << reply->truncated_turns()
         << " oldest turn(s) to fit the model's context" << std::endl;
  }
  return common::Status::Ok();
}

int ChatRepl::ExitCodeFor(const common::Status& status) {
  if (status.code() == common::StatusCode::kUnavailable) {
    err_ << "niels-chat: " << status.message() << std::endl;
    return kExitUnreachable;
  }
  if (status.code() == common::StatusCode::kCancelled) {
    err_ << "niels-chat: reply cancelled" << std::endl;
    return kExitInterrupted;
  }
  err_ << "niels-chat: " << status.ToString() << std::endl;
  any_failed_ = true;
  return kExitTurnFailed;
}

int ChatRepl::HandleLine(const std::string& line, bool interactive) {
  if (line.empty()) return kContinue;
  const SlashCommand command = ParseSlashCommand(line);
  if (command.kind != SlashCommand::Kind::kTurn) {
    const int code = RunCommand(command);
    if (code == kExitTurnFailed) return kContinue;
    return code;
  }
  if (!IsValidUtf8(command.argument)) {
    err_ << "niels-chat: input is not valid UTF-8; line skipped" << std::endl;
    any_failed_ = true;
    return kContinue;
  }
  const common::Status status = Turn(command.argument);
  if (status.ok()) return kContinue;
  const int code = ExitCodeFor(status);
  if (code == kExitTurnFailed) return kContinue;
  if (code == kExitInterrupted && interactive) return kContinue;  // back to the prompt
  return code;
}

int ChatRepl::RunOneShot(const std::string& prompt) {
  if (!IsValidUtf8(prompt)) {
    err_ << "niels-chat: --prompt is not valid UTF-8" << std::endl;
    return kExitTurnFailed;
  }
  const common::Status status = Turn(prompt);
  if (!status.ok()) return ExitCodeFor(status);
  return any_failed_ ? kExitTurnFailed : kExitOk;
}

int ChatRepl::RunLines(std::istream& in) {
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int code = HandleLine(line, /*interactive=*/false);
    if (code != kContinue) return code;
  }
  if (g_interrupted) return kExitInterrupted;
  return any_failed_ ? kExitTurnFailed : kExitOk;
}

int ChatRepl::RunTerminal(const std::string& history_path) {
  HistoryFile history(history_path, err_);
  const int code = RunPrompt(history);
  if (durable_ && turns_ > 0 && code != kExitUnreachable) {
    err_ << "niels-chat: conversation kept as session " << session_id_
         << " (continue with niels-chat --resume, or --session " << session_id_ << ")" << std::endl;
  }
  return code;
}

int ChatRepl::RunPrompt(HistoryFile& history) {
  while (true) {
    g_interrupted = 0;
    char* raw = readline("> ");
    if (raw == nullptr) {
      if (g_interrupted) {
        out_ << std::endl;
        return kExitInterrupted;
      }
      out_ << std::endl;  // EOF: end the prompt line
      return kExitOk;
    }
    std::string line(raw);
    std::free(raw);
    if (!line.empty()) history.Add(line);
    const int code = HandleLine(line, /*interactive=*/true);
    if (code != kContinue) return code;
  }
}

}  // namespace niels::client
