#pragma once
// Session: one chat session (docs/ARCHITECTURE.md, "Sessions and the KV cache"): its owner, its token history with the KV cache of a
// prefix of it (model::Sequence), and the turn boundaries the context-limit policy works with.
// The cache reuses and registers shared prefix blocks in its owner's scope only
// (KvPool::ScopeRoot(owner)): sessions of one user share prompt blocks, users never do.
//
// History layout: [system prompt span][turn 1][turn 2]...[turn k][tail]. The system prompt span is
// [0, system_end()) (empty when the session has none). Each turn is a completed chat turn
// ([usr] text [eot] [asst] reply [eot]) with its [begin, end) span; raw Generate appends to the tail,
// which belongs to no turn. Turns never overlap and are ordered.
//
// Atomic turns: TakeSnapshot() before a turn, Restore() on cancel or failure. While the history only
// grows, restoring truncates the cache back to its old length; when a turn must replace the cache
// (the uncached path) it first moves the old cache into the snapshot, or shares it (KvCache::Share:
// the same blocks, no copy), so Restore() needs no recomputation. Context truncation is the
// exception: it releases the positions after the system prompt at once (DropOldestTurns), so a
// truncating turn never holds its old and its new history together, and a restored session
// prefills those positions again when next used.
//
// Conversations (a model with a Jinja chat template, text/chat_format.h, or a niels_gpt session
// with tools, engine/chat_turn.h's conversation mode): the session also keeps
// its conversation after the system prompt as messages (user, assistant and tool messages; the
// system prompt is the session's own) and its tools (rendered before the conversation), from which every
// chat turn renders its prompt again; its token history is then the last rendering plus the reply,
// what the KV cache was computed from, and it has no turn spans. system_end() is the prefix every
// rendering starts with (kept by Reset): the system prompt's ChatFormat::SessionStart, 0 without a
// system prompt. A session stored by an earlier nielsd may hold the template's start there without
// a system prompt (it prefilled one at CreateSession); it is a chat session already started: its
// next Chat turn renders the same start and reuses it as a prefix, and Reset keeps it.
//
// Sampled replies (conversations): an assistant message a turn generated, whose reply ended on a
// stop id, is remembered with the span of its ids in the history (SampledReply), so that the next
// rendering can keep the ids the model wrote for it instead of the template's own spelling of the
// message (engine/sampled_replies.h). Anything that changes the history before a reply's end or the
// conversation up to its message forgets it: TruncateHistory, Rewind, Reset, SetMessages (callers
// put back what stays valid), DropOldestTurns. They are not stored in the database: a session
// loaded from it renders its replies the template's way once.
//
// Not thread-safe: sessions live on the engine thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/model/sequence.h"
#include "daemon/model/kv_cache.h"
#include "daemon/state/stored_session.h"
#include "daemon/text/chat_format.h"

namespace niels::daemon::sessions {

// Half-open token range [begin, end) of the history.
struct TokenSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const TokenSpan&) const = default;
};

// An assistant message whose ids in the history are the ones the model sampled (see above).
struct SampledReply {
  size_t message = 0;  // its index in Session::messages()
  int64_t end = 0;     // one past its stop id in the history
  // The ids the template writes for the message's segment (what follows the previous stop id, up to
  // and including its own) when the message ends the conversation; empty until the next turn works
  // them out.
  std::vector<int32_t> rendering;
  bool operator==(const SampledReply&) const = default;
};

class Session {
 public:
  // What Restore() needs to undo a turn. Cheap unless a cache was stashed.
  struct Snapshot {
    std::vector<int32_t> tokens;
    std::vector<TokenSpan> turns;
    std::vector<text::ChatMessage> messages;
    std::shared_ptr<const std::vector<text::ToolDefinition>> tools;
    std::vector<SampledReply> sampled_replies;
    int64_t system_end = 0;
    int64_t cache_length = 0;
    std::optional<model::KvCache> stashed_cache;  // set by StashCache()
  };

  // An empty session (no system prompt, no tokens) whose cache takes blocks from `pool`. `id` is 32
  // hex digits (NewSessionId()).
  Session(std::string id, common::OwnerId owner, std::shared_ptr<model::KvPool> pool);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  common::OwnerId owner() const { return owner_; }

  model::Sequence& sequence() { return sequence_; }
  const model::Sequence& sequence() const { return sequence_; }
  const std::vector<int32_t>& tokens() const { return sequence_.tokens; }
  int64_t length() const { return static_cast<int64_t>(sequence_.tokens.size()); }
  int64_t cached_tokens() const { return sequence_.cache.length(); }
  int64_t kv_bytes() const { return sequence_.cache.bytes(); }
  // KV blocks only this session holds / shares with other sessions or forks (prefix sharing).
  int64_t own_blocks() const { return sequence_.cache.own_blocks(); }
  int64_t shared_blocks() const { return sequence_.cache.shared_blocks(); }

  bool has_system_prompt() const { return has_system_prompt_; }
  // The text the system prompt was made from ("" when none or unknown).
  const std::string& system_prompt_text() const { return system_prompt_text_; }
  int64_t system_end() const { return system_end_; }
  const std::vector<TokenSpan>& turns() const { return turns_; }
  // The conversation after the system prompt (template chat formats; empty for token-native
  // sessions).
  const std::vector<text::ChatMessage>& messages() const { return messages_; }
  // Completed chat turns: token-native turns plus the conversation's assistant messages.
  int32_t completed_turns() const;
  // The tools every rendering of the conversation is given; null when none.
  const std::shared_ptr<const std::vector<text::ToolDefinition>>& tools() const { return tools_; }
  // Replaces the tools (empty or null: none).
  void SetTools(std::shared_ptr<const std::vector<text::ToolDefinition>> tools);

  // Makes `ids` (encoded from `text`) the system prompt span. REQUIRES: the session is empty.
  void SetSystemPrompt(std::vector<int32_t> ids, std::string text = "");
  // Records a completed turn. REQUIRES: span within the history, after every earlier turn.
  void AddTurn(TokenSpan span);
  // Appends `id` to the history as the last token of the last turn.
  // REQUIRES: a turn exists and it ends at length().
  void AppendToLastTurn(int32_t id);

  // History length if the oldest `count` turns (and tail tokens before them) were dropped.
  // REQUIRES: count <= turns().size().
  int64_t LengthWithoutOldestTurns(size_t count) const;
  // Drops the oldest `count` turns: tokens [system_end, turns[count-1].end) go, later spans shift,
  // and the cache keeps only the system prompt's positions (later positions moved); the blocks of
  // the others are released at once. Restore() brings the tokens and turns back with only the
  // system prompt cached (the rest is prefilled when next needed). No-op for count == 0.
  void DropOldestTurns(size_t count, Snapshot& snapshot);

  // Appends a completed exchange to the conversation: the user's message and the assistant's reply.
  void AddExchange(text::ChatMessage user, text::ChatMessage assistant);
  // Replaces the conversation after the system prompt and forgets the sampled replies. Tokens and
  // cache are untouched: the next rendering is compared with them.
  void SetMessages(std::vector<text::ChatMessage> messages);
  // The assistant messages whose history ids are the sampled ones, ordered by `end`.
  const std::vector<SampledReply>& sampled_replies() const { return sampled_replies_; }
  // REQUIRES: each reply's message exists and is an assistant message, its end within the history
  // and after the previous one's.
  void SetSampledReplies(std::vector<SampledReply> replies) { sampled_replies_ = std::move(replies); }
  // Keeps the first `length` tokens of the history and at most that much of the cache (a new
  // rendering that agrees with the history up to `length` replaces the rest); system_end() drops
  // to `length` when it was beyond. Restore() brings back the tokens with the cache covering at most
  // `length` positions (the positions after it are written by the turn). REQUIRES: length <= length().
  void TruncateHistory(int64_t length, Snapshot& snapshot);

  // Back to the system prompt alone (cache truncated to it; the conversation emptied; the tools stay).
  void Reset();
  // Keeps the first `keep` token-native turns, or the first `keep` messages of the conversation,
  // and the first `length` tokens of the history, the cache at most that much; the later ones
  // are gone. REQUIRES: keep <= turns().size() (token-native) or messages().size(), one kind only;
  // system_end() <= length <= length().
  void Rewind(size_t keep, int64_t length);
  // Frees the KV cache; the history stays and is re-prefilled on next use.
  void DropCache();

  Snapshot TakeSnapshot() const;
  // Moves the cache into `snapshot` (if not already stashed) and leaves an empty one in the session.
  void StashCache(Snapshot& snapshot);
  // Shares the cache into `snapshot` (if not already stashed); the session keeps its cache.
  void StashCacheCopy(Snapshot& snapshot);
  // Puts history, turns and cache back as they were at TakeSnapshot().
  void Restore(Snapshot snapshot);

  // A copy with a new id and owner: same history and turns, and (if with_cache) a cache sharing this
  // one's blocks (copy on write: the first write into a shared block copies that block only);
  // shares nothing mutable with this session.
  std::unique_ptr<Session> Fork(std::string new_id, common::OwnerId owner, bool with_cache) const;

  // Durable sessions (docs/ARCHITECTURE.md, "Durable sessions"): the history as the state
  // database stores it, and a session rebuilt from a stored one (history only, no cache).
  state::StoredHistory History() const;
  static std::unique_ptr<Session> FromStored(const state::StoredSession& stored, std::shared_ptr<model::KvPool> pool);
  // When the database last recorded a use of this session (SessionRegistry decides when to write).
  double stored_last_used_unix_s() const { return stored_last_used_unix_s_; }
  void set_stored_last_used_unix_s(double t) { stored_last_used_unix_s_ = t; }

  // Busy: a running turn (or a new session's system-prompt prefill) is writing this session, with
  // `reserved_blocks` KV blocks set aside for it (KvBudget::Admit). A busy session's cache is never
  // dropped to make room for another's, and the session is never unloaded or expired meanwhile.
  bool busy() const { return busy_; }
  int64_t reserved_blocks() const { return reserved_blocks_; }
  void MarkBusy(int64_t reserved_blocks) {
    busy_ = true;
    reserved_blocks_ = reserved_blocks;
  }
  void ClearBusy() {
    busy_ = false;
    reserved_blocks_ = 0;
  }

  // Bookkeeping for listing, LRU eviction and idle expiry (set by SessionRegistry).
  double created_unix_s() const { return created_unix_s_; }
  double last_used_unix_s() const { return last_used_unix_s_; }
  uint64_t last_use_tick() const { return last_use_tick_; }
  std::chrono::steady_clock::time_point last_used() const { return last_used_; }
  void Touch(uint64_t tick);

 private:
  // An empty cache on the engine's pool in the owner's prefix scope.
  model::KvCache EmptyCache() const { return model::KvCache(pool_, model::KvPool::ScopeRoot(owner_)); }

  std::string id_;
  common::OwnerId owner_;
  std::shared_ptr<model::KvPool> pool_;
  model::Sequence sequence_;
  bool has_system_prompt_ = false;
  std::string system_prompt_text_;
  int64_t system_end_ = 0;
  double stored_last_used_unix_s_ = 0;
  std::vector<TokenSpan> turns_;
  std::vector<text::ChatMessage> messages_;
  std::vector<SampledReply> sampled_replies_;
  std::shared_ptr<const std::vector<text::ToolDefinition>> tools_;
  double created_unix_s_ = 0;
  double last_used_unix_s_ = 0;
  uint64_t last_use_tick_ = 0;
  bool busy_ = false;
  int64_t reserved_blocks_ = 0;
  std::chrono::steady_clock::time_point last_used_ = std::chrono::steady_clock::now();
};

// 32 lowercase hex digits from 128 bits of std::random_device.
std::string NewSessionId();

// Seconds since the Unix epoch (wall clock).
double UnixNow();

}  // namespace niels::daemon::sessions
