#pragma once
// The file niels-chat keeps typed lines in across runs (like a shell's history):
// $XDG_STATE_HOME/niels-chat/history, or ~/.local/state/niels-chat/history when XDG_STATE_HOME is
// unset or not absolute (XDG Base Directory spec). Only interactive (terminal) input is recorded.
//
// HistoryFile loads the file into libedit's readline-compatible history and rewrites it after each
// recorded line (at most kMaxEntries kept). The directory is created with mode 0700 and the file
// always has mode 0600: chat lines are private. Failures to read or write are reported once on the
// error stream given to Open and never stop the chat. Single-threaded.

#include <iosfwd>
#include <optional>
#include <string>

namespace niels::client {

// The history path for this environment, or nullopt when neither XDG_STATE_HOME nor HOME is usable.
std::optional<std::string> DefaultHistoryPath(const char* xdg_state_home, const char* home);

class HistoryFile {
 public:
  static constexpr int kMaxEntries = 1000;

  // Creates the parent directory if needed and loads the existing entries into libedit's history.
  // `path` empty: no file (lines are still kept in memory for this run).
  HistoryFile(std::string path, std::ostream& err);

  // Adds a typed line to the in-memory history and saves the file.
  void Add(const std::string& line);

  const std::string& path() const { return path_; }

 private:
  void Warn(const std::string& what);

  std::string path_;
  std::ostream& err_;
  bool warned_ = false;
};

}  // namespace niels::client
