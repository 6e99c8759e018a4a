#pragma once
// MatcherCore: the shared, growing cache behind a Matcher and its clones (matcher.h). Internal to
// the grammar room.
//
// The grammar runs as a pushdown automaton over code points, in llama.cpp's manner: a *stack* is a
// list of positions in the grammar's alternatives (the top one always a character class, the ones
// below it where to continue after the rule above them ends), and a parse state is the SET of all
// stacks the text so far allows (ambiguity and alternatives are explored in parallel). Here stacks
// are interned frames (position, parent frame), so equal stacks are equal ids, and a set of
// stacks is interned too: a "state" id. Transitions between states are computed on first use and
// kept (per state: a table for ASCII bytes, and for other code points one entry per interval of
// code points that the state's classes do not tell apart), so the matcher turns into a lazily built
// DFA over the text actually seen. A state also caches its token mask.
//
// Limits (MatcherLimits) bound frames, states, stacks per state and stack depth; exceeding one is
// a sticky RESOURCE_EXHAUSTED error, never a hang or unbounded memory.
// Not thread-safe: one core per request, used from one thread.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/code_point_set.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/token_bitset.h"
#include "daemon/grammar/vocabulary.h"

namespace niels::daemon::grammar {

struct MatcherLimits {
  // Distinct stack frames (grammar position + what is below it), over everything the request
  // explored, token masks included. ~56 bytes each with their index. Default 500,000 (~28 MB).
  size_t max_frames = 500'000;
  // Distinct sets of stacks (states). Each costs ~750 bytes with its transition tables and key,
  // plus 8 bytes per stack. Default 20,000 (~15 MB; a JSON generation uses tens to hundreds, a
  // string with maxLength one per character).
  size_t max_states = 20'000;
  // Stacks in one state (alternatives alive at once). Default 10,000.
  size_t max_stacks_per_state = 10'000;
  // Deepest stack (nesting of rules, e.g. of JSON arrays in objects). Default 2,000.
  uint32_t max_stack_depth = 2'000;
  // Token masks kept per core (19 KB each at 151,936 tokens). Default 256.
  size_t max_cached_masks = 256;
};

class MatcherCore {
 public:
  static constexpr int32_t kDead = -1;     // no stack survives
  static constexpr int32_t kError = -2;    // a limit was exceeded (status() says which)
  static constexpr int32_t kUnknown = -3;  // transition not computed yet (internal)
  static constexpr uint32_t kNoFrame = UINT32_MAX;

  MatcherCore(std::shared_ptr<const CompiledGrammar> grammar, const MatcherLimits& limits);

  const CompiledGrammar& grammar() const { return *grammar_; }
  const common::Status& status() const { return status_; }

  // The state before any text. kError if a limit is exceeded already.
  int32_t Start();
  // The state after one more character, or kDead / kError. REQUIRES: state >= 0.
  int32_t Next(int32_t state, uint32_t cp) {
    if (cp < 128) {
      int32_t& slot = states_[state].ascii[cp];
      if (slot != kUnknown) return slot;
      const int32_t next = Step(state, cp);
      states_[state].ascii[cp] = next;
      return next;
    }
    return NextSlow(state, cp);
  }
  bool Accepting(int32_t state) const { return states_[state].accepting; }
  bool HasStacks(int32_t state) const { return !states_[state].stacks.empty(); }
  // Whether some character in [lo, hi] can come next.
  bool CanTakeAnyOf(int32_t state, uint32_t lo, uint32_t hi) const {
    return states_[state].first.Intersects(lo, hi);
  }
  // Fewest bytes that complete the output from `state` (0 when accepting).
  uint32_t MinBytes(int32_t state) const { return states_[state].min_bytes; }
  // Fewest bytes after the character now begun, for a state in the middle of one.
  uint32_t MinBytesAfterCurrentChar(int32_t state) const;

  // Runs: a run is a sequence of states S_0, S_1, ... that every character of one large set L
  // moves along (S_i --c--> S_(i+1) for all c in L, the same S_(i+1)), such as the inside of a JSON
  // string (a run of one state looping on itself) or of a string with maxLength (one state per
  // character count). A token made only of characters of L then leads from S_i to S_(i+n), n its
  // character count, whatever its characters are: its mask comes from Vocabulary::LoopTable
  // instead of a trie walk.
  // The loop table of `state`'s run when the state starts or continues a run worth it (most tokens
  // inside L), else null; decided once per state and vocabulary.
  const Vocabulary::LoopTable* RunTable(int32_t state, const Vocabulary& vocab);
  // The state n characters of L after `state` along its run: a state, kDead, or kUnknown where
  // the run stops being uniform (then the caller walks the trie). REQUIRES: RunTable(state) != null.
  int32_t RunStateAfter(int32_t state, uint32_t n);

  // The cached mask of a state for `vocab_key`, or null.
  const TokenBitset* CachedMask(int32_t state, const void* vocab_key) const;
  void CacheMask(int32_t state, const void* vocab_key, const TokenBitset& mask);

  size_t state_count() const { return states_.size(); }
  size_t frame_count() const { return frames_.size(); }
  size_t run_count() const { return runs_.size(); }

 private:
  struct Frame {
    uint32_t pos;        // element index in the grammar
    uint32_t parent;     // frame below, or kNoFrame
    uint32_t depth;
    uint32_t min_bytes;  // fewest bytes to pop this frame and everything below
  };
  struct State {
    std::vector<uint32_t> stacks;  // top frames (each at a kClass element), sorted
    bool accepting = false;        // the empty stack is in the set
    uint32_t min_bytes = 0;
    CodePointSet first;            // union of the top classes
    int32_t ascii[128];
    std::vector<uint32_t> bounds;  // non-ASCII intervals [bounds[i], bounds[i+1]) ...
    std::vector<int32_t> bound_next;
    bool run_decided = false;  // for loop_vocab_
    int32_t run = -1;          // index into runs_, or -1
    uint32_t run_index = 0;    // this state is runs_[run].states[run_index]
  };
  struct Run {
    CodePointSet chars;           // L
    uint32_t representative = 0;  // a member of L
    std::vector<int32_t> states;
    enum End : uint8_t { kOpen, kDead, kCycle, kBroken } end = kOpen;
    size_t cycle_start = 0;
    std::shared_ptr<const Vocabulary::LoopTable> table;  // null: not worth it
  };

  bool Uniform(int32_t state, const CodePointSet& chars) const;
  void ExtendRun(int32_t run, size_t upto);
  int32_t StartRun(int32_t state, const Vocabulary& vocab);

  int32_t NextSlow(int32_t state, uint32_t cp);
  int32_t Step(int32_t state, uint32_t cp);
  // Adds the stacks reachable from (pos, parent) without reading a character to scratch_.
  void Expand(uint32_t pos, uint32_t parent);
  uint32_t InternFrame(uint32_t pos, uint32_t parent);
  int32_t InternState();  // from scratch_ / scratch_accepting_
  int32_t Fail(std::string message);

  std::shared_ptr<const CompiledGrammar> grammar_;
  MatcherLimits limits_;
  common::Status status_;
  int32_t start_ = kUnknown;

  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, uint32_t> frame_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;
  std::vector<Run> runs_;

  // Expansion scratch.
  std::vector<uint32_t> scratch_;
  bool scratch_accepting_ = false;
  std::vector<std::pair<uint32_t, uint32_t>> work_;
  std::unordered_set<uint64_t> visited_;

  // Mask cache: state -> mask, for one vocabulary at a time.
  const void* mask_vocab_ = nullptr;
  const void* loop_vocab_ = nullptr;
  std::unordered_map<int32_t, TokenBitset> masks_;
};

}  // namespace niels::daemon::grammar
