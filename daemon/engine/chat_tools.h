#pragma once
// Tools in chat turns (proto/PROTOCOL.md, "Tools"): which calls a reply may make (ToolChoice), the
// hook through which a choice may constrain the reply, and ReplyToolCalls, which splits a reply's
// answer text into content and the tool calls it made (the model family's parser,
// tool_calls/tool_call_parser.h) and gives each call its id. Engine thread only.

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/budgets.h"
#include "common/owner.h"
#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/text/chat_format.h"
#include "daemon/tool_grammar/tool_call_grammar.h"
#include "daemon/tool_calls/tool_call_parser.h"

namespace niels::daemon::engine {

struct EngineState;

// Which calls a reply may make.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed: the tool
};

// The most calls one reply makes: once a reply has made this many, the rest of its text is content
// (InfoResponse budget tool_calls_per_reply).
inline constexpr size_t kMaxToolCallsPerReply = common::kToolCallsPerReplyLimit;

// The forced-choice grammars of the tool sets in use (tool_grammar/tool_call_grammar.h), by the
// identity of the set: the shared vector that sessions, their forks and snapshots hold. A request
// that sets tools compiled them off the engine thread (handlers::CompileToolGrammars); its start
// remembers them here. A set restored from disk has none until it is sent again. Entries whose set
// is gone are dropped at the next Remember, so there are at most as many as live sets.
// Memory: the grammars of the live sets are counted (ToolChoiceGrammars::memory_bytes), in all and
// per owner (a uid or an API-key principal: the one whose request sent the set; a fork shares its
// entry); Remember refuses a set that would pass either limit, so one owner's sets hold at most
// `bytes_per_uid` and everyone's
// at most `bytes` (EngineOptions: 1 GiB and 256 MiB by default). Engine thread only.
class ToolGrammarCache {
 public:
  using Tools = std::shared_ptr<const std::vector<text::ToolDefinition>>;
  struct Entry {
    std::weak_ptr<const std::vector<text::ToolDefinition>> tools;
    std::shared_ptr<const tool_grammar::ToolChoiceGrammars> grammars;  // null: status says why
    common::Status status;
    common::OwnerId owner = 0;
    uint64_t bytes = 0;  // grammars->memory_bytes()
  };
  void SetLimits(uint64_t bytes, uint64_t bytes_per_uid) {
    max_bytes_ = bytes;
    max_bytes_per_uid_ = bytes_per_uid;
  }
  // Keeps the grammars of `tools`, a set a request of `owner` sent. A set already kept is not
  // counted again. RESOURCE_EXHAUSTED ("tools: ...", nothing kept) when the live sets' grammars with
  // these would hold more than the limits, in all or of `owner`; the request should then fail before it
  // changes anything. Cost: O(entries) (the expired ones are dropped first).
  common::Status Remember(const Tools& tools, std::shared_ptr<const tool_grammar::ToolChoiceGrammars> grammars,
                          common::Status status, common::OwnerId owner);
  // The entry of `tools`; null when none was remembered for this set.
  const Entry* Find(const Tools& tools) const;
  size_t size() const { return entries_.size(); }
  // The bytes the live sets' grammars hold, in all and of one owner's sets (expired sets not counted).
  uint64_t bytes() const;
  uint64_t bytes_of(common::OwnerId owner) const;

 private:
  std::map<const void*, Entry> entries_;
  uint64_t max_bytes_ = UINT64_MAX;
  uint64_t max_bytes_per_uid_ = UINT64_MAX;
};

// Where a tool choice becomes a constraint on the reply: null when the reply is free (kNone: no
// calls); kAuto: the set's lazy grammar from `cache` (free text until the family's trigger, then
// calls whose arguments follow their schemas), or null (calls parsed from free text) when there
// are no tools or the set has no grammar (restored from disk and not sent again, or refused by the
// tool grammar); kRequired and kNamed: the set's grammar (one or more calls of any tool / of the
// named one, from the first byte after an optional reasoning block). INVALID_ARGUMENT when there are no tools, when kNamed names no tool of `tools`,
// or when the set cannot be forced (the reason compiling gave); FAILED_PRECONDITION when the set
// was restored from disk and has not been sent again (its grammars are not compiled).
common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> ToolChoiceConstraint(
    const ToolGrammarCache& cache, const ToolGrammarCache::Tools& tools, const ToolChoice& choice);

// A piece of a call as a stream shows it: the call's index in the reply, its id and name in its
// first piece ("" in later ones), a fragment of its arguments.
struct ToolCallPiece {
  size_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

// The ids of one reply's calls: "call_" and 24 random hex digits, none equal to an id the
// conversation already holds (so ids are unique in their session). The stream and the committed
// reply of a turn share one, so the ids agree.
class ToolCallIds {
 public:
  explicit ToolCallIds(std::span<const text::ChatMessage> conversation);
  // The id of call `index`, made on first use. REQUIRES: indexes asked in order from 0.
  const std::string& Id(size_t index);

 private:
  std::set<std::string> taken_;
  std::vector<std::string> ids_;
};

// One reply's answer text split into content and calls (the family's parser with the tools'
// names; tool_choice none: all content). The text is fed a byte at a time, so the result does not
// depend on how it was cut; after kMaxToolCallsPerReply calls the rest is content.
class ReplyToolCalls {
 public:
  struct Piece {
    std::string content;               // text that belongs to no call
    std::vector<ToolCallPiece> calls;  // the calls completed by this piece
  };

  ReplyToolCalls(tool_calls::ToolCallFamily family, const std::vector<text::ToolDefinition>& tools, bool calls_allowed,
                 std::shared_ptr<ToolCallIds> ids);
  Piece Feed(std::string_view text);
  // The reply ended: what was held back. Call once.
  Piece Finish();

  // The whole answer at once: its content and its calls with their ids.
  static std::pair<std::string, std::vector<text::ToolCall>> Parse(tool_calls::ToolCallFamily family,
                                                                   const std::vector<text::ToolDefinition>& tools,
                                                                   bool calls_allowed, std::shared_ptr<ToolCallIds> ids,
                                                                   std::string_view answer);

 private:
  void Add(tool_calls::Delta delta, Piece& out);

  std::unique_ptr<tool_calls::ToolCallParser> parser_;
  std::shared_ptr<ToolCallIds> ids_;
  size_t calls_ = 0;
  bool capped_ = false;  // the parser is finished: everything now is content
};

}  // namespace niels::daemon::engine
