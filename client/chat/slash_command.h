#pragma once
// niels-chat's slash commands: parsing one input line into a command or a chat turn. Pure; no I/O.
//
//   /help          list the commands
//   /reset         same session, its history cleared, the system prompt kept
//   /retry         regenerate the last reply (the last turn is sent again)
//   /undo          drop the last turn (its message and the reply)
//   /edit TEXT     replace the last message with TEXT and reply to it
//   /system TEXT   a new system prompt (a fresh session); "/system" alone shows the current one
//   /new           a new conversation (a fresh session, same system prompt)
//   /session       show the session id (to continue it later with --session)
//   /stats         toggle the per-reply stats line
//   /exit          end the chat
// Any other line starting with "/" is an unknown command (never sent to the model). A line starting
// with "//" is a chat turn with the first "/" removed, so text starting with "/" can still be sent.

#include <string>
#include <string_view>

namespace niels::client {

struct SlashCommand {
  enum class Kind { kTurn, kHelp, kReset, kRetry, kUndo, kEdit, kNew, kSession, kSystem, kStats, kExit, kUnknown };
  Kind kind = Kind::kTurn;
  // kTurn: the text to send; kSystem: the new prompt ("" = show the current one); kEdit: the new
  // text of the last message ("" = nothing to send: a usage line);
  // kUnknown: the command word as typed (e.g. "/foo").
  std::string argument;
};

SlashCommand ParseSlashCommand(std::string_view line);

// The /help text, one command per line.
std::string SlashCommandHelp();

// The one line printed for an unknown command.
std::string UnknownCommandMessage(std::string_view command);

}  // namespace niels::client
