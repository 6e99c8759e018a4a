#include "client/chat/slash_command.h"

namespace niels::client {
namespace {

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

SlashCommand ParseSlashCommand(std::string_view line) {
  using Kind = SlashCommand::Kind;
  if (!line.starts_with('/')) return {Kind::kTurn, std::string(line)};
  if (line.starts_with("//")) return {Kind::kTurn, std::string(line.substr(1))};
  const size_t end = line.find_first_of(" \t");
  const std::string_view word = line.substr(0, end);
  const std::string_view rest =
      end == std::string_view::npos ? std::string_view() : TrimSpaces(line.substr(end));
  if (word == "/system") return {Kind::kSystem, std::string(rest)};
  if (word == "/edit") return {Kind::kEdit, std::string(rest)};
  if (!rest.empty()) return {Kind::kUnknown, std::string(word)};  // e.g. "/reset now"
  if (word == "/help" || word == "/?") return {Kind::kHelp, ""};
  if (word == "/reset") return {Kind::kReset, ""};
  if (word == "/retry") return {Kind::kRetry, ""};
  if (word == "/undo") return {Kind::kUndo, ""};
  if (word == "/new") return {Kind::kNew, ""};
  if (word == "/session") return {Kind::kSession, ""};
  if (word == "/stats") return {Kind::kStats, ""};
  if (word == "/exit" || word == "/quit") return {Kind::kExit, ""};
  return {Kind::kUnknown, std::string(word)};
}

std::string SlashCommandHelp() {
  return "commands:\n"
         "  /help          this list\n"
         "  /reset         clear the conversation (the system prompt stays)\n"
         "  /retry         regenerate the last reply\n"
         "  /undo          drop the last turn (your message and the reply)\n"
         "  /edit TEXT     replace your last message with TEXT and get a new reply\n"
         "  /new           start a new conversation (the current one is kept)\n"
         "  /session       show this conversation's session id (niels-chat --session ID continues it)\n"
         "  /system TEXT   start over with a new system prompt (/system alone shows it)\n"
         "  /stats         toggle per-reply stats (tokens, time to first token, cache)\n"
         "  /exit          quit (also Ctrl-D)\n"
         "  //text         send text that starts with a slash\n";
}

std::string UnknownCommandMessage(std::string_view command) {
  return "niels-chat: unknown command " + std::string(command) +
         " (commands: /help /reset /retry /undo /edit TEXT /new /session /system TEXT /stats /exit; //text sends "
         "text starting with /)";
}

}  // namespace niels::client
