// RunToolCommand (niels-chat --tool-exec) with real /bin/sh commands.
#include "client/chat/tool_command.h"

#include <gtest/gtest.h>

#include <string>

namespace niels::client {
namespace {

v1::ToolCall Call(std::string arguments) {
  v1::ToolCall call;
  call.set_id("call_7");
  call.set_name("lookup");
  call.set_arguments(std::move(arguments));
  return call;
}

ToolCommandResult MustRun(const std::string& command, const v1::ToolCall& call) {
  std::string error;
  auto result = RunToolCommand(command, call, {}, &error);
  EXPECT_TRUE(result.has_value()) << error;
  return result.value_or(ToolCommandResult{});
}

TEST(ToolCommandTest, ArgumentsOnStdinNameAndIdInTheEnvironment) {
  const ToolCommandResult r =
      MustRun(R"(printf '%s|%s|' "$NIELS_TOOL_NAME" "$NIELS_TOOL_CALL_ID"; cat)", Call(R"({"q": [1, "x"]})"));
  EXPECT_EQ(r.output, R"(lookup|call_7|{"q": [1, "x"]})");
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_FALSE(r.cut);
  // One trailing newline is dropped, as a shell's $(...) would; empty arguments give empty input.
  EXPECT_EQ(MustRun("echo two; echo lines", Call("")).output, "two\nlines");
  EXPECT_EQ(MustRun("wc -c", Call("")).output, "0");
}

TEST(ToolCommandTest, AFailedCommandStillAnswersAndSaysHowItEnded) {
  const ToolCommandResult failed = MustRun("echo partial; echo oops >&2; exit 3", Call("{}"));
  EXPECT_EQ(failed.exit_status, 3);
  EXPECT_EQ(failed.output, "partial\n[the command failed with exit status 3]");
  const ToolCommandResult killed = MustRun("kill -9 $$", Call("{}"));
  EXPECT_EQ(killed.exit_status, 128 + 9);
  EXPECT_EQ(killed.output, "\n[the command was ended by signal 9]");
  const ToolCommandResult missing = MustRun("/nonexistent/tool", Call("{}"));
  EXPECT_EQ(missing.exit_status, 127);
}

TEST(ToolCommandTest, OutputIsCutAtTheBoundAndReadToTheEnd) {
  const ToolCommandResult r = MustRun("head -c 1000000 /dev/zero | tr '\\000' a; echo done >&2", Call("{}"));
  EXPECT_TRUE(r.cut);
  EXPECT_EQ(r.exit_status, 0);  // read to the end: the writer was never stopped by a full pipe
  const std::string marker = "\n[output cut at " + std::to_string(kMaxToolOutputBytes) + " bytes]";
  ASSERT_EQ(r.output.size(), kMaxToolOutputBytes + marker.size());
  EXPECT_EQ(r.output.substr(0, kMaxToolOutputBytes), std::string(kMaxToolOutputBytes, 'a'));
  EXPECT_EQ(r.output.substr(kMaxToolOutputBytes), marker);
}

TEST(ToolCommandTest, ACommandThatIgnoresLargeArgumentsDoesNotHang) {
  // 4 MiB of arguments are far more than a pipe holds; the command never reads them.
  const ToolCommandResult r = MustRun("echo ignored", Call(std::string(4 << 20, 'x')));
  EXPECT_EQ(r.output, "ignored");
  // And one that reads them all gets every byte.
  EXPECT_EQ(MustRun("wc -c", Call(std::string(4 << 20, 'x'))).output, std::to_string(4 << 20));
}

TEST(ToolCommandTest, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(MustRun(R"(printf '\377ok\303')", Call("{}")).output, "\xEF\xBF\xBDok\xEF\xBF\xBD");
  EXPECT_EQ(MustRun(R"(printf '\303\251\360\237\231\202')", Call("{}")).output, "\xC3\xA9\xF0\x9F\x99\x82");
  EXPECT_EQ(MustRun(R"(printf '\355\240\200')", Call("{}")).output,  // a surrogate, encoded
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ToolCommandTest, AnInterruptStopsTheCommandAndEndsTheTurn) {
  std::string error;
  auto result = RunToolCommand("sleep 30", Call("{}"), [] { return true; }, &error);
  EXPECT_FALSE(result.has_value());
  EXPECT_EQ(error, "interrupted");
}

}  // namespace
}  // namespace niels::client
