// Parsing of niels-chat's slash commands and the history file location.
#include "client/chat/slash_command.h"

#include <gtest/gtest.h>

#include "client/chat/history_file.h"

namespace niels::client {
namespace {

using Kind = SlashCommand::Kind;

TEST(SlashCommandTest, PlainTextIsATurn) {
  const SlashCommand c = ParseSlashCommand("what is /run/nielsd?");
  EXPECT_EQ(c.kind, Kind::kTurn);
  EXPECT_EQ(c.argument, "what is /run/nielsd?");
}

TEST(SlashCommandTest, KnownCommands) {
  EXPECT_EQ(ParseSlashCommand("/help").kind, Kind::kHelp);
  EXPECT_EQ(ParseSlashCommand("/reset").kind, Kind::kReset);
  EXPECT_EQ(ParseSlashCommand("/stats").kind, Kind::kStats);
  EXPECT_EQ(ParseSlashCommand("/new").kind, Kind::kNew);
  EXPECT_EQ(ParseSlashCommand("/session").kind, Kind::kSession);
  EXPECT_EQ(ParseSlashCommand("/new chat").kind, Kind::kUnknown);
  EXPECT_EQ(ParseSlashCommand("/exit").kind, Kind::kExit);
  EXPECT_EQ(ParseSlashCommand("/reset  ").kind, Kind::kReset);
  EXPECT_EQ(ParseSlashCommand("/retry").kind, Kind::kRetry);
  EXPECT_EQ(ParseSlashCommand("/undo").kind, Kind::kUndo);
  EXPECT_EQ(ParseSlashCommand("/undo 2").kind, Kind::kUnknown);
  const SlashCommand edit = ParseSlashCommand("/edit  say it shorter ");
  EXPECT_EQ(edit.kind, Kind::kEdit);
  EXPECT_EQ(edit.argument, "say it shorter");
  EXPECT_EQ(ParseSlashCommand("/edit").argument, "");
}

TEST(SlashCommandTest, SystemTakesTheRestOfTheLine) {
  const SlashCommand c = ParseSlashCommand("/system   you are a pirate.  ");
  EXPECT_EQ(c.kind, Kind::kSystem);
  EXPECT_EQ(c.argument, "you are a pirate.");
  EXPECT_EQ(ParseSlashCommand("/system").argument, "");
}

TEST(SlashCommandTest, UnknownCommandsAndStrayArgumentsAreNotTurns) {
  SlashCommand c = ParseSlashCommand("/frobnicate now");
  EXPECT_EQ(c.kind, Kind::kUnknown);
  EXPECT_EQ(c.argument, "/frobnicate");
  EXPECT_EQ(ParseSlashCommand("/").kind, Kind::kUnknown);
  EXPECT_EQ(ParseSlashCommand("/exit please").kind, Kind::kUnknown);
  EXPECT_EQ(ParseSlashCommand("/Help").kind, Kind::kUnknown);
  const std::string message = UnknownCommandMessage("/frobnicate");
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("/help"), std::string::npos);
}

TEST(SlashCommandTest, DoubleSlashSendsTheTextWithOneSlash) {
  const SlashCommand c = ParseSlashCommand("//etc/passwd is a file");
  EXPECT_EQ(c.kind, Kind::kTurn);
  EXPECT_EQ(c.argument, "/etc/passwd is a file");
}

TEST(HistoryPathTest, XdgStateHomeThenHome) {
  EXPECT_EQ(DefaultHistoryPath("/s", "/home/u"), "/s/niels-chat/history");
  EXPECT_EQ(DefaultHistoryPath(nullptr, "/home/u"), "/home/u/.local/state/niels-chat/history");
  EXPECT_EQ(DefaultHistoryPath("relative", "/home/u"), "/home/u/.local/state/niels-chat/history");
  EXPECT_EQ(DefaultHistoryPath("", nullptr), std::nullopt);
}

}  // namespace
}  // namespace niels::client
