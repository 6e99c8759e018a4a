// niels-chat --tool-exec CMD: answers a tool call by running a command.
//
// The command runs through /bin/sh -c, once per call, with the call's arguments (its JSON text)
// on standard input and NIELS_TOOL_NAME and NIELS_TOOL_CALL_ID in its environment; its standard
// error goes to niels-chat's, and its standard output is the result sent back to the model. A
// command that fails still answers: its output is followed by a line saying how it ended, so the
// model learns that the tool failed. At most kMaxToolOutputBytes of output are kept (the rest is
// read and dropped, and the cut is marked); the result is sent as a tool message, which must be
// UTF-8, so invalid bytes are replaced by U+FFFD.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "niels/v1/nielsd.pb.h"

namespace niels::client {

inline constexpr std::size_t kMaxToolOutputBytes = 256 * 1024;

struct ToolCommandResult {
  std::string output;  // what is sent back: stdout, cut and with the failure line when there is one
  int exit_status = 0;   // the command's exit status; 128 + N when signal N ended it
  bool cut = false;      // output passed kMaxToolOutputBytes
};

// Runs `command` for `call` and waits for it. The command stays in niels-chat's process group, so
// Ctrl-C reaches it as it would from a shell. nullopt when it could not be started, or when
// `interrupted()` turned true while it ran (then it is sent SIGTERM and reaped); the reason goes
// to `error`. `interrupted` may be empty.
std::optional<ToolCommandResult> RunToolCommand(const std::string& command, const niels::v1::ToolCall& call,
                                                const std::function<bool()>& interrupted, std::string* error);

// The tool-result reader of --tool-exec CMD: runs `command` per call (checking Ctrl-C with
// `interrupted`), notes each result's size and exit status on `err` ("[tool result N bytes, exit
// status S]"), and ends the turn (nullopt, the reason on `err`) when the command cannot run or is
// interrupted.
std::function<std::optional<std::string>(const niels::v1::ToolCall&)> ToolCommandReader(
    std::string command, std::function<bool()> interrupted, std::ostream& err);

}  // namespace niels::client
