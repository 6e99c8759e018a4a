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
// State memory is O(stacks): a state holds its stack ids and the ids of the distinct grammar
// classes on top of them (never copies of the classes); the union of those classes is kept only
// when it is small (kMaxUnionRanges), and non-ASCII transitions are kept per interval actually met.
//
// Budgets (MatcherLimits), each a sticky RESOURCE_EXHAUSTED error whose message ends with
// "(budget matcher_steps_per_token)" or "(budget matcher_memory_bytes)", never a hang or unbounded
// memory:
//   - work: matcher steps per token (max_steps_per_token). A step is one unit of work whose cost
//     does not grow with the input (O(1), or one binary search in a class): a stack tested against
//     a character, a stack reached while expanding rules, a stack or class entered into a new
//     state, a class consulted for a non-ASCII character, a code point range compared while
//     deciding a run. A token's window is everything
//     from the end of the previous AcceptToken/AcceptBytes (or the matcher's construction, start
//     state included) to the end of the next one, the masks and byte sets asked for in between
//     included. Besides its steps, a mask walks the vocabulary's trie at most once (or a run
//     table's exits): those cached lookups are bounded by the vocabulary, and counted apart
//     (MatcherStats::trie_nodes). A run set new to the matcher also costs one scan of the
//     vocabulary for its loop table (at most max_run_sets per matcher).
//   - memory: estimated bytes held by the core (frames, states, their transitions, runs, run
//     sets, cached masks), max_memory_bytes; and the counts below.
// The spelling bound (SpellBound) walks its states with the same steps, in the window of the mask
// that asks for it, and gives up (no bound) rather than take more than half of what the window,
// max_states or max_memory_bytes have left.
// So a request's matcher work is at most max_steps_per_token x (max_new_tokens + 1) steps.
// Not thread-safe: one core per request, used from one thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/budgets.h"
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
  // Distinct sets of stacks (states). Each costs ~800 bytes with its transition table and index,
  // plus 8 bytes per stack. Default 20,000 (a JSON generation uses tens to hundreds, a string with
  // maxLength one per character).
  size_t max_states = 20'000;
  // Stacks in one state (alternatives alive at once). Default 10,000.
  size_t max_stacks_per_state = 10'000;
  // Deepest stack (nesting of rules, e.g. of JSON arrays in objects). Default 2,000.
  uint32_t max_stack_depth = 2'000;
  // Token masks kept per core (19 KB each at 151,936 tokens). Default 256.
  size_t max_cached_masks = 256;
  // Work budget: matcher steps (see above) in one token's window. Default 250,000: at most ~50-70 ms
  // of CPU (the costliest steps, each making a new stack frame, take ~0.2-0.3 us on the 2-vCPU EPYC
  // guest); the JSON Schemas of the tests need at most ~6,500 per token on Qwen3's 151,936-id
  // vocabulary, an enum of 500 strings ~32,000.
  uint64_t max_steps_per_token = common::kMatcherStepsPerToken;
  // Memory budget: estimated bytes the core holds. Default 64 MiB (a JSON Schema generation on
  // Qwen3's vocabulary holds a few MB, most of it cached masks).
  size_t max_memory_bytes = common::kMatcherMemoryBytes;
  // Distinct character sets of runs (each a loop table over the vocabulary, one scan of it to
  // build). A state whose run would need another set takes its masks from the trie. Default 8.
  size_t max_run_sets = 8;
};

// What a core has done and holds (for tests, benchmarks and the fuzz target).
struct MatcherStats {
  uint64_t steps = 0;                 // matcher steps in all
  uint64_t max_steps_in_a_token = 0;  // the most steps in one token's window so far
  uint64_t steps_this_token = 0;      // steps in the current window
  uint64_t transitions = 0;           // (state, character) transitions computed
  uint64_t trie_nodes = 0;            // trie nodes and run exits visited by masks (not budgeted)
  uint64_t loop_table_scans = 0;      // run sets new to this core (each one vocabulary scan)
  size_t states = 0;
  size_t frames = 0;
  size_t stacks_held = 0;             // stack ids over all states
  size_t ranges_held = 0;             // code point ranges held by states and run sets
  size_t memory_bytes = 0;            // estimated bytes held now
  size_t peak_memory_bytes = 0;
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
  // Whether some character in [lo, hi] can come next (one step per class when the state keeps no
  // union of its classes).
  bool CanTakeAnyOf(int32_t state, uint32_t lo, uint32_t hi) {
    const State& s = states_[state];
    if (s.has_union) return s.union_of_classes.Intersects(lo, hi);
    return CanTakeAnyOfSlow(state, lo, hi);
  }
  // Fewest bytes that complete the output from `state` (0 when accepting).
  uint32_t MinBytes(int32_t state) const { return states_[state].min_bytes; }
  // Fewest bytes after the character now begun, for a state in the middle of one whose code point
  // lies in [lo, hi]: over the stacks whose class meets [lo, hi] (one step per stack; UINT32_MAX
  // when none does).
  uint32_t MinBytesAfterCurrentChar(int32_t state, uint32_t lo, uint32_t hi);

  // The spelling bound of `state` over `vocab` (see matcher.h, "Completion within a budget"): the
  // fewest ids of `vocab` whose bytes, joined, are the state's canonical shortest completion w*,
  // each id ending on a character boundary of w*; kNoBound when w* is longer than kMaxSpellBytes,
  // when no such ids exist, or when computing it would take more than half of what is left of the
  // token's step budget or of max_states. w*(s) is empty for an accepting s, else c(s) followed by
  // w*(Next(s, c(s))), c(s) the least code point that begins a shortest completion (the least
  // Min() of the top classes of the stacks whose completion is shortest). Computed once per state
  // and vocabulary, for every state along w* at once (so the bound of the state after the first id
  // of the spelling is the bound less one): O(|w*|) matcher steps plus a walk of the trie from each
  // character boundary along w* (counted as trie nodes).
  uint32_t SpellBound(int32_t state, const Vocabulary& vocab);
  static constexpr uint32_t kNoBound = UINT32_MAX;
  static constexpr size_t kMaxSpellBytes = 1024;

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

  // The cached mask of a state for `vocab_key`, or null; with it the most bytes any of its ids
  // leaves to complete (Matcher::AllowedTokensWithin).
  const TokenBitset* CachedMask(int32_t state, const void* vocab_key, uint32_t* worst_bytes_after = nullptr) const;
  void CacheMask(int32_t state, const void* vocab_key, const TokenBitset& mask, uint32_t worst_bytes_after);

  size_t state_count() const { return states_.size(); }
  size_t frame_count() const { return frames_.size(); }
  size_t run_count() const { return runs_.size(); }

  // Closes the current token's window (see the budgets above): the next steps count for the next
  // token.
  void EndTokenWindow() { stats_.steps_this_token = 0; }
  // Trie nodes or run exits a mask visited.
  void CountTrieNodes(uint64_t n) { stats_.trie_nodes += n; }
  MatcherStats stats() const;
  // Largest union of a state's classes that the state keeps (ranges).
  static constexpr size_t kMaxUnionRanges = 64;
  // Most code point ranges compared to decide one run start or one run step; past it the state
  // takes its masks from the trie.
  static constexpr size_t kMaxRunCheckRanges = 4096;

 private:
  struct Frame {
    uint32_t pos;        // element index in the grammar
    uint32_t parent;     // frame below, or kNoFrame
    uint32_t depth;
    uint32_t min_bytes;  // fewest bytes to pop this frame and everything below
  };
  // Where the code points [lo, hi] (all >= 0x80, none told apart by the state's classes) lead; kept
  // in State::edges under hi.
  struct NonAsciiEdge {
    uint32_t lo;
    int32_t next;
  };
  struct State {
    std::vector<uint32_t> stacks;   // top frames (each at a kClass element), sorted
    std::vector<uint32_t> classes;  // the distinct class ids of their elements, sorted
    // The stacks grouped by class: those of classes[i] are
    // stacks_by_class[class_begin[i] .. class_begin[i + 1]) (a step tests each class once).
    std::vector<uint32_t> stacks_by_class;
    std::vector<uint32_t> class_begin;
    uint64_t hash = 0;              // of stacks and accepting
    bool accepting = false;         // the empty stack is in the set
    uint32_t min_bytes = 0;
    bool has_union = false;         // union_of_classes is kept (at most kMaxUnionRanges ranges)
    CodePointSet union_of_classes;
    int32_t ascii[128];
    std::map<uint32_t, NonAsciiEdge> edges;  // by hi; disjoint
    uint32_t spell = kSpellUnknown;  // SpellBound for spell_vocab_
    bool run_decided = false;  // for loop_vocab_
    int32_t run = -1;          // index into runs_, or -1
    uint32_t run_index = 0;    // this state is runs_[run].states[run_index]
  };
  // A distinct run character set L and its loop table (shared by the runs over it).
  struct RunSet {
    CodePointSet chars;
    std::shared_ptr<const Vocabulary::LoopTable> table;
    bool worth_it = false;  // most tokens stay inside chars
  };
  struct Run {
    uint32_t set = 0;             // index into run_sets_
    uint32_t representative = 0;  // a member of L
    std::vector<int32_t> states;
    enum End : uint8_t { kOpen, kDead, kCycle, kBroken } end = kOpen;
    size_t cycle_start = 0;
  };

  // Charges `n` steps to the window; false (and a sticky error) past the budget.
  bool Charge(uint64_t n);
  // Adds `bytes` to the memory held; false (and a sticky error) past the budget.
  bool Hold(size_t bytes);
  void Release(size_t bytes) { memory_bytes_ -= std::min(memory_bytes_, bytes); }
  void ReleaseScratch();
  static constexpr uint32_t kSpellUnknown = UINT32_MAX - 1;
  bool CanTakeAnyOfSlow(int32_t state, uint32_t lo, uint32_t hi);
  // c(s) of SpellBound: the least code point that begins a shortest completion.
  uint32_t CanonicalChar(int32_t state);
  const CodePointSet& ClassOfFrame(uint32_t frame) const {
    return grammar_->char_class(grammar_->elements()[frames_[frame].pos].arg);
  }
  bool Uniform(int32_t state, const CodePointSet& chars);
  int32_t FindOrAddRunSet(CodePointSet chars, const Vocabulary& vocab);
  void ExtendRun(int32_t run, size_t upto);
  int32_t StartRun(int32_t state, const Vocabulary& vocab);

  int32_t NextSlow(int32_t state, uint32_t cp);
  int32_t Step(int32_t state, uint32_t cp);
  // Adds the stacks reachable from (pos, parent) without reading a character to scratch_.
  void Expand(uint32_t pos, uint32_t parent);
  uint32_t InternFrame(uint32_t pos, uint32_t parent);
  int32_t InternState();  // from scratch_ / scratch_accepting_
  int32_t Fail(std::string message);
  // Fails with a budget's refusal (common::Refuse: counted, "... (budget NAME)"), unless failed already.
  void FailOver(common::BudgetId budget, std::string_view what);

  std::shared_ptr<const CompiledGrammar> grammar_;
  MatcherLimits limits_;
  common::Status status_;
  int32_t start_ = kUnknown;

  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, uint32_t> frame_ids_;
  std::vector<State> states_;
  std::unordered_multimap<uint64_t, int32_t> state_ids_;  // hash of stacks and accepting -> state
  std::vector<Run> runs_;
  std::vector<RunSet> run_sets_;

  MatcherStats stats_;
  size_t memory_bytes_ = 0;
  size_t peak_memory_bytes_ = 0;
  size_t stacks_held_ = 0;
  size_t ranges_held_ = 0;
  size_t run_bytes_ = 0;  // memory held by runs_ and run_sets_

  // Expansion scratch.
  std::vector<uint32_t> scratch_;
  bool scratch_accepting_ = false;
  std::vector<std::pair<uint32_t, uint32_t>> work_;
  std::unordered_set<uint64_t> visited_;

  // Mask cache: state -> mask, for one vocabulary at a time.
  const void* mask_vocab_ = nullptr;
  const void* loop_vocab_ = nullptr;
  std::unordered_map<int32_t, TokenBitset> masks_;
  std::unordered_map<int32_t, uint32_t> mask_worst_;  // beside masks_
  const void* spell_vocab_ = nullptr;                  // the vocabulary of State::spell
  size_t mask_bytes_ = 0;  // memory held by masks_
};

}  // namespace niels::daemon::grammar
