// niels-chat: the terminal chat client of nielsd (docs/ARCHITECTURE.md "niels-chat"). Flags,
// wiring, run.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <variant>

#include <editline/readline.h>

#include "client/chat/chat_options.h"
#include "client/chat/chat_repl.h"
#include "client/chat/history_file.h"
#include "client/chat/tool_command.h"
#include "client/daemon_client.h"
#include "common/socket_path.h"

namespace {

using namespace niels::client;

int Run(ChatOptions options) {
  auto path = niels::common::ResolveSocketPath(options.socket, niels::common::SocketEnv::FromProcess());
  if (!path.ok()) {
    std::cerr << "niels-chat: " << path.status().message() << std::endl;
    return kExitUnreachable;
  }
  auto system_prompt = ResolveSystemPrompt(options);
  if (!system_prompt.ok()) {
    std::cerr << "niels-chat: " << system_prompt.status().message() << std::endl;
    return kExitTurnFailed;
  }
  auto constraint = ResolveConstraint(options);
  if (!constraint.ok()) {
    std::cerr << "niels-chat: " << constraint.status().message() << std::endl;
    return kExitTurnFailed;
  }
  options.constraint = std::move(constraint).value();
  auto tools = ResolveTools(options);
  if (!tools.ok()) {
    std::cerr << "niels-chat: " << tools.status().message() << std::endl;
    return kExitTurnFailed;
  }
  options.tools = std::move(tools).value();
  auto client = DaemonClient::Connect(*path);
  if (!client.ok()) {
    std::cerr << UnreachableMessage(*path, client.status(), !options.socket.empty()) << std::endl;
    return kExitUnreachable;
  }
  auto info = (*client)->Info();
  if (!info.ok()) {
    std::cerr << "niels-chat: Info failed: " << info.status().ToString() << std::endl;
    return kExitUnreachable;
  }
  if (!options.ckpt.empty() && !CkptMatchesModel(options.ckpt, *info)) {
    std::cerr << "niels-chat: nielsd at " << *path << " serves model '" << info->model_name() << "' from "
              << info->model_path() << ", not --ckpt " << options.ckpt << "; restart nielsd with --model "
              << options.ckpt << std::endl;
    return kExitTurnFailed;
  }
  const char* no_color = std::getenv("NO_COLOR");
  options.faint_logprobs = ::isatty(STDERR_FILENO) != 0 && (no_color == nullptr || *no_color == '\0');
  ChatRepl repl(client->get(), options, std::cout, std::cerr);
  repl.SetDurable(info->durable_sessions());
  repl.SetReasoningDisplay(
      ChooseReasoningDisplay(options.hide_reasoning, ::isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR")));
  repl.InstallInterruptHandler();
  niels::common::Status started;
  if (!options.session.empty()) {
    started = repl.Continue(options.session);
  } else if (options.resume) {
    started = repl.Resume(*system_prompt);
  } else {
    started = repl.Start(*system_prompt);
  }
  if (!started.ok()) {
    std::cerr << "niels-chat: cannot " << (options.session.empty() ? "create a chat session" : "continue session " + options.session)
              << ": " << started.ToString() << std::endl;
    return started.code() == niels::common::StatusCode::kUnavailable ? kExitUnreachable : kExitTurnFailed;
  }
  const bool terminal = ::isatty(STDIN_FILENO) != 0 && !options.prompt;
  if (options.tools && !options.tool_exec.empty()) {
    // --tool-exec: the command's output is the result; a failed command still answers.
    repl.SetToolResultReader(ToolCommandReader(options.tool_exec, &ChatRepl::InterruptedOutsideReply, std::cerr));
  } else if (options.tools) {
    // A call's result: one line typed at a "result> " prompt, or the next input line.
    repl.SetToolResultReader([terminal](const niels::v1::ToolCall& call) -> std::optional<std::string> {
      if (terminal) {
        const std::string prompt = "result of " + call.name() + "> ";
        char* raw = readline(prompt.c_str());
        if (raw == nullptr) return std::nullopt;
        std::string line(raw);
        std::free(raw);
        return line;
      }
      std::string line;
      if (!std::getline(std::cin, line)) return std::nullopt;
      return line;
    });
  }
  if (options.prompt) return repl.RunOneShot(*options.prompt);
  if (::isatty(STDIN_FILENO)) {
    const auto history = DefaultHistoryPath(std::getenv("XDG_STATE_HOME"), std::getenv("HOME"));
    return repl.RunTerminal(history.value_or(""));
  }
  return repl.RunLines(std::cin);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);  // a vanished daemon is reported as an error, not a signal
  auto parsed = ParseChatFlags(argc, argv, std::cout, std::cerr);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  return Run(std::move(std::get<ChatOptions>(parsed)));
}
