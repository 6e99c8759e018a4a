#include "daemon/grammar/matcher_core.h"

#include <algorithm>
#include <cstring>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

using Element = CompiledGrammar::Element;

namespace {

// Estimated bytes of what the core keeps (the memory budget): a frame with its index entry, a
// state's fixed part with its index entry, a node of a state's non-ASCII transitions, a cached
// mask's fixed part.
constexpr size_t kFrameBytes = 56;
constexpr size_t kStateIndexBytes = 48;
constexpr size_t kEdgeBytes = 64;
constexpr size_t kMaskOverheadBytes = 64;
// Expansion scratch larger than this is given back after the step that grew it.
constexpr size_t kKeptScratchEntries = 1024;

uint64_t HashStacks(const std::vector<uint32_t>& stacks, bool accepting) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (accepting ? 1 : 0);
  for (uint32_t f : stacks) {
    h ^= f;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
  }
  return h;
}

size_t LoopTableBytes(const Vocabulary::LoopTable& t) {
  size_t ids = 0;
  for (const auto& v : t.inside_by_chars) ids += v.size();
  return t.inside.words().size() * sizeof(uint64_t) + ids * sizeof(int32_t) +
         t.exits.size() * sizeof(Vocabulary::LoopExit);
}

}  // namespace

MatcherCore::MatcherCore(std::shared_ptr<const CompiledGrammar> grammar, const MatcherLimits& limits)
    : grammar_(std::move(grammar)), limits_(limits) {}

void MatcherCore::FailOver(common::BudgetId budget, std::string_view what) {
  if (status_.ok()) status_ = common::Refuse(budget, what);
}

int32_t MatcherCore::Fail(std::string message) {
  if (status_.ok()) status_ = common::Status::ResourceExhausted(std::move(message));
  return kError;
}

bool MatcherCore::Charge(uint64_t n) {
  if (!status_.ok()) return false;  // failed: nothing more is done, or counted
  stats_.steps += n;
  stats_.steps_this_token += n;
  stats_.max_steps_in_a_token = std::max(stats_.max_steps_in_a_token, stats_.steps_this_token);
  if (stats_.steps_this_token <= limits_.max_steps_per_token) return true;
  FailOver(common::BudgetId::kMatcherStepsPerToken,
           fmt::format("grammar matcher: more than {} steps for one token, the grammar keeps too many parses alive",
                       limits_.max_steps_per_token));
  return false;
}

bool MatcherCore::Hold(size_t bytes) {
  memory_bytes_ += bytes;
  peak_memory_bytes_ = std::max(peak_memory_bytes_, memory_bytes_);
  if (memory_bytes_ <= limits_.max_memory_bytes) return true;
  FailOver(common::BudgetId::kMatcherMemoryBytes,
           fmt::format("grammar matcher: more than {} bytes held", limits_.max_memory_bytes));
  return false;
}

void MatcherCore::ReleaseScratch() {
  if (scratch_.capacity() > kKeptScratchEntries) std::vector<uint32_t>().swap(scratch_);
  if (work_.capacity() > kKeptScratchEntries) std::vector<std::pair<uint32_t, uint32_t>>().swap(work_);
  if (visited_.bucket_count() > kKeptScratchEntries) std::unordered_set<uint64_t>().swap(visited_);
}

MatcherStats MatcherCore::stats() const {
  MatcherStats s = stats_;
  s.states = states_.size();
  s.frames = frames_.size();
  s.stacks_held = stacks_held_;
  s.ranges_held = ranges_held_;
  s.memory_bytes = memory_bytes_;
  s.peak_memory_bytes = peak_memory_bytes_;
  return s;
}

int32_t MatcherCore::Start() {
  if (start_ != kUnknown) return start_;
  if (!status_.ok()) return kError;
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  const auto roots = grammar_->alternatives(grammar_->root());
  if (!Charge(roots.size())) return kError;
  for (uint32_t alt : roots) Expand(alt, kNoFrame);
  start_ = status_.ok() ? InternState() : kError;
  ReleaseScratch();
  return start_;
}

uint32_t MatcherCore::InternFrame(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto it = frame_ids_.find(key);
  if (it != frame_ids_.end()) return it->second;
  const uint32_t depth = parent == kNoFrame ? 1 : frames_[parent].depth + 1;
  if (depth > limits_.max_stack_depth) {
    Fail(fmt::format("grammar nesting deeper than {} levels", limits_.max_stack_depth));
    return kNoFrame;
  }
  if (frames_.size() >= limits_.max_frames) {
    Fail(fmt::format("grammar matcher needs more than {} stack frames", limits_.max_frames));
    return kNoFrame;
  }
  if (!Hold(kFrameBytes)) return kNoFrame;
  const uint32_t below = parent == kNoFrame ? 0 : frames_[parent].min_bytes;
  const uint32_t own = grammar_->suffix_min_bytes(pos);
  const uint64_t sum = uint64_t{own} + below;
  frames_.push_back({pos, parent, depth, sum >= UINT32_MAX ? UINT32_MAX - 1 : static_cast<uint32_t>(sum)});
  const auto id = static_cast<uint32_t>(frames_.size() - 1);
  frame_ids_.emplace(key, id);
  return id;
}

void MatcherCore::Expand(uint32_t pos, uint32_t parent) {
  const std::vector<Element>& elements = grammar_->elements();
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty() && status_.ok()) {
    if (!Charge(1)) return;
    const auto [p, below] = work_.back();
    work_.pop_back();
    if (!visited_.insert((uint64_t{p} << 32) | below).second) continue;
    const Element& e = elements[p];
    if (e.kind == Element::kEnd) {
      if (below == kNoFrame) {
        scratch_accepting_ = true;
      } else {
        work_.emplace_back(frames_[below].pos, frames_[below].parent);
      }
    } else if (e.kind == Element::kClass) {
      const uint32_t frame = InternFrame(p, below);
      if (frame != kNoFrame) scratch_.push_back(frame);
    } else {
      // Continue after the reference; when nothing follows in this alternative, return straight to
      // the frame below (so right recursion such as S ::= x S does not deepen the stack).
      uint32_t ret = below;
      if (elements[p + 1].kind != Element::kEnd) {
        ret = InternFrame(p + 1, below);
        if (ret == kNoFrame) return;
      }
      for (uint32_t alt : grammar_->alternatives(e.arg)) work_.emplace_back(alt, ret);
    }
  }
}

int32_t MatcherCore::InternState() {
  if (!Charge(scratch_.size() + 1)) return kError;
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.empty() && !scratch_accepting_) return kDead;
  if (scratch_.size() > limits_.max_stacks_per_state) {
    return Fail(fmt::format("grammar matcher has more than {} parses alive at once",
                            limits_.max_stacks_per_state));
  }
  const uint64_t hash = HashStacks(scratch_, scratch_accepting_);
  for (auto [it, end] = state_ids_.equal_range(hash); it != end; ++it) {
    const State& known = states_[it->second];
    if (known.accepting == scratch_accepting_ && known.stacks == scratch_) return it->second;
  }
  if (states_.size() >= limits_.max_states) {
    return Fail(fmt::format("grammar matcher needs more than {} states", limits_.max_states));
  }
  // The state refers to the grammar's classes by id: its size is O(stacks), whatever the classes.
  State s;
  s.stacks = scratch_;  // exactly sized
  s.hash = hash;
  s.accepting = scratch_accepting_;
  s.min_bytes = s.accepting ? 0 : UINT32_MAX;
  std::fill(std::begin(s.ascii), std::end(s.ascii), kUnknown);
  std::vector<std::pair<uint32_t, uint32_t>> by_class;  // (class, stack)
  by_class.reserve(s.stacks.size());
  for (uint32_t f : s.stacks) {
    s.min_bytes = std::min(s.min_bytes, frames_[f].min_bytes);
    by_class.emplace_back(grammar_->elements()[frames_[f].pos].arg, f);
  }
  std::sort(by_class.begin(), by_class.end());
  s.stacks_by_class.reserve(by_class.size());
  for (size_t i = 0; i < by_class.size(); ++i) {
    if (i == 0 || by_class[i].first != by_class[i - 1].first) {
      s.classes.push_back(by_class[i].first);
      s.class_begin.push_back(static_cast<uint32_t>(i));
    }
    s.stacks_by_class.push_back(by_class[i].second);
  }
  s.class_begin.push_back(static_cast<uint32_t>(by_class.size()));
  s.classes.shrink_to_fit();
  s.class_begin.shrink_to_fit();
  size_t union_ranges = 0;
  for (uint32_t c : s.classes) {
    union_ranges += grammar_->char_class(c).ranges().size();
    if (union_ranges > kMaxUnionRanges) break;
  }
  if (union_ranges <= kMaxUnionRanges) {
    std::vector<CodePointRange> ranges;
    for (uint32_t c : s.classes) {
      const auto& r = grammar_->char_class(c).ranges();
      ranges.insert(ranges.end(), r.begin(), r.end());
    }
    s.union_of_classes = CodePointSet(std::move(ranges));
    s.has_union = true;
  }
  const size_t ranges = s.union_of_classes.ranges().size();
  if (!Hold(sizeof(State) + kStateIndexBytes + (2 * s.stacks.size() + 2 * s.classes.size() + 1) * sizeof(uint32_t) +
            ranges * sizeof(CodePointRange))) {
    return kError;
  }
  stacks_held_ += s.stacks.size();
  ranges_held_ += ranges;
  states_.push_back(std::move(s));
  const auto id = static_cast<int32_t>(states_.size() - 1);
  state_ids_.emplace(hash, id);
  return id;
}

int32_t MatcherCore::Step(int32_t state, uint32_t cp) {
  if (!status_.ok()) return kError;
  ++stats_.transitions;
  // Each class is tested once; only the stacks of the classes holding cp go on (their expansion
  // counts its own steps).
  if (!Charge(states_[state].classes.size() + 1)) return kError;
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  std::vector<uint32_t> taking;  // the stacks whose class holds cp
  {
    const State& s = states_[state];
    for (size_t i = 0; i < s.classes.size(); ++i) {
      if (!grammar_->char_class(s.classes[i]).Contains(cp)) continue;
      taking.insert(taking.end(), s.stacks_by_class.begin() + s.class_begin[i],
                    s.stacks_by_class.begin() + s.class_begin[i + 1]);
    }
  }
  // Expand may grow frames_ (and InternState states_): frames are copied, `taking` is our own.
  for (uint32_t f : taking) {
    const Frame frame = frames_[f];
    Expand(frame.pos + 1, frame.parent);
    if (!status_.ok()) return kError;
  }
  const int32_t next = InternState();
  ReleaseScratch();
  return next;
}

bool MatcherCore::CanTakeAnyOfSlow(int32_t state, uint32_t lo, uint32_t hi) {
  const std::vector<uint32_t>& classes = states_[state].classes;
  if (!Charge(classes.size())) return false;
  for (uint32_t c : classes) {
    if (grammar_->char_class(c).Intersects(lo, hi)) return true;
  }
  return false;
}

int32_t MatcherCore::NextSlow(int32_t state, uint32_t cp) {
  {
    const std::map<uint32_t, NonAsciiEdge>& edges = states_[state].edges;
    auto it = edges.lower_bound(cp);  // the first interval ending at or after cp
    if (it != edges.end() && it->second.lo <= cp) return it->second.next;
  }
  if (!status_.ok()) return kError;
  // The interval around cp that none of the state's classes tells apart: every code point in it
  // leads to the same state.
  uint32_t lo = 0x80, hi = kMaxCodePoint;
  if (!Charge(states_[state].classes.size())) return kError;
  for (uint32_t c : states_[state].classes) grammar_->char_class(c).NarrowToConstantAround(cp, &lo, &hi);
  const int32_t next = Step(state, cp);
  if (next == kError) return kError;
  states_[state].edges.emplace(hi, NonAsciiEdge{lo, next});
  if (!Hold(kEdgeBytes)) return kError;
  return next;
}

uint32_t MatcherCore::MinBytesAfterCurrentChar(int32_t state, uint32_t lo, uint32_t hi) {
  uint32_t best = UINT32_MAX;
  (void)Charge(states_[state].stacks.size());
  for (uint32_t f : states_[state].stacks) {
    const CodePointSet& cls = ClassOfFrame(f);
    if (!cls.Intersects(lo, hi)) continue;
    const uint32_t own = Utf8Length(cls.Min());  // frame.min_bytes = own + what follows the character
    best = std::min(best, frames_[f].min_bytes - std::min(frames_[f].min_bytes, own));
  }
  return best;
}

uint32_t MatcherCore::CanonicalChar(int32_t state) {
  const State& s = states_[state];
  (void)Charge(s.stacks.size());
  uint32_t best = UINT32_MAX;
  for (uint32_t f : s.stacks) {
    if (frames_[f].min_bytes == s.min_bytes) best = std::min(best, ClassOfFrame(f).Min());
  }
  return best;
}

uint32_t MatcherCore::SpellBound(int32_t state, const Vocabulary& vocab) {
  if (states_[state].accepting) return 0;
  if (spell_vocab_ != &vocab) {
    for (State& s : states_) s.spell = kSpellUnknown;
    spell_vocab_ = &vocab;
  }
  if (states_[state].spell != kSpellUnknown) return states_[state].spell;
  if (states_[state].min_bytes > kMaxSpellBytes) {
    states_[state].spell = kNoBound;
    return kNoBound;
  }
  // w* and the states along it; the walk stops at an accepting state or at one whose bound is known.
  std::string w;
  std::vector<int32_t> path = {state};
  std::vector<uint32_t> boundary = {0};
  // Never more than half of what the token's window and the state limit leave.
  const uint64_t steps_cap = stats_.steps_this_token +
                             (limits_.max_steps_per_token - std::min(limits_.max_steps_per_token, stats_.steps_this_token)) / 2;
  const size_t states_cap = states_.size() + (limits_.max_states - std::min(limits_.max_states, states_.size())) / 2;
  int32_t st = state;
  while (!states_[st].accepting && (st == state || states_[st].spell == kSpellUnknown)) {
    if (!status_.ok() || stats_.steps_this_token > steps_cap || states_.size() >= states_cap ||
        memory_bytes_ > limits_.max_memory_bytes / 2) {
      return kNoBound;
    }
    if (w.size() > kMaxSpellBytes) break;
    const uint32_t c = CanonicalChar(st);
    if (c > kMaxCodePoint) return kNoBound;
    AppendUtf8(c, &w);
    st = Next(st, c);
    if (st < 0) return kNoBound;
    path.push_back(st);
    boundary.push_back(static_cast<uint32_t>(w.size()));
  }
  if (w.size() > kMaxSpellBytes) {
    states_[state].spell = kNoBound;
    return kNoBound;
  }
  const size_t last = path.size() - 1;
  std::vector<int32_t> at_byte(w.size() + 1, -1);  // byte offset -> index into path, at boundaries
  for (size_t k = 0; k <= last; ++k) at_byte[boundary[k]] = static_cast<int32_t>(k);
  std::vector<uint32_t> best(last + 1, kNoBound);
  best[last] = states_[path[last]].accepting ? 0 : states_[path[last]].spell;
  const std::vector<Vocabulary::TrieNode>& trie = vocab.trie();
  uint64_t visited = 0;
  for (size_t k = last; k-- > 0;) {
    const size_t i = boundary[k];
    int32_t node = vocab.root_child(static_cast<uint8_t>(w[i]));
    while (node >= 0) {
      ++visited;
      const size_t j = i + trie[node].depth;
      if (trie[node].token >= 0 && at_byte[j] >= 0 && best[at_byte[j]] < kNoBound - 1) {
        best[k] = std::min(best[k], best[at_byte[j]] + 1);
      }
      if (j >= w.size()) break;
      // The child of `node` with byte w[j]: its children follow it in preorder, each subtree whole.
      const uint8_t want = static_cast<uint8_t>(w[j]);
      int32_t child = -1;
      for (uint32_t c = static_cast<uint32_t>(node) + 1; c < trie[node].subtree_end; c = trie[c].subtree_end) {
        ++visited;
        if (trie[c].byte == want) {
          child = static_cast<int32_t>(c);
          break;
        }
      }
      node = child;
    }
  }
  CountTrieNodes(visited);
  for (size_t k = 0; k < last; ++k) {
    if (states_[path[k]].spell == kSpellUnknown) states_[path[k]].spell = best[k] >= kSpellUnknown ? kNoBound : best[k];
  }
  return states_[state].spell == kSpellUnknown ? kNoBound : states_[state].spell;
}

// Every top class of the state either holds all of `chars` or none of them, so all of `chars` move
// the state the same way. False (the run stops) also when that takes more than kMaxRunCheckRanges
// range comparisons.
bool MatcherCore::Uniform(int32_t state, const CodePointSet& chars) {
  const std::vector<uint32_t>& classes = states_[state].classes;
  if (!Charge(classes.size())) return false;
  size_t cost = 0;
  for (uint32_t c : classes) cost += chars.ranges().size() + grammar_->char_class(c).ranges().size();
  if (cost > kMaxRunCheckRanges || !Charge(cost)) return false;
  for (uint32_t c : classes) {
    const CodePointSet& cls = grammar_->char_class(c);
    if (cls.Intersects(chars) && !cls.ContainsAll(chars)) return false;
  }
  return true;
}

int32_t MatcherCore::FindOrAddRunSet(CodePointSet chars, const Vocabulary& vocab) {
  for (size_t i = 0; i < run_sets_.size(); ++i) {
    if (run_sets_[i].chars == chars) return static_cast<int32_t>(i);
  }
  if (run_sets_.size() >= limits_.max_run_sets) return -1;
  RunSet set;
  set.table = vocab.LoopTableFor(chars);
  ++stats_.loop_table_scans;
  set.worth_it = set.table->exits.size() * 4 < static_cast<size_t>(vocab.size());
  const size_t bytes = sizeof(RunSet) + chars.ranges().size() * sizeof(CodePointRange) + LoopTableBytes(*set.table);
  ranges_held_ += chars.ranges().size();
  set.chars = std::move(chars);
  run_sets_.push_back(std::move(set));
  run_bytes_ += bytes;
  if (!Hold(bytes)) return -1;
  return static_cast<int32_t>(run_sets_.size() - 1);
}

// A new run from `state`: L is the state's largest top class less every part another top class
// splits off; worth it when L holds most printable ASCII and most tokens stay inside it. No run
// when deciding takes more than kMaxRunCheckRanges range comparisons.
int32_t MatcherCore::StartRun(int32_t state, const Vocabulary& vocab) {
  const std::vector<uint32_t> classes = states_[state].classes;
  if (classes.empty() || !Charge(classes.size())) return -1;
  size_t cost = 0;
  for (uint32_t c : classes) cost += grammar_->char_class(c).ranges().size();
  if (cost > kMaxRunCheckRanges || !Charge(cost)) return -1;
  const CodePointSet* biggest = &grammar_->char_class(classes[0]);
  for (uint32_t c : classes) {
    if (grammar_->char_class(c).Size() > biggest->Size()) biggest = &grammar_->char_class(c);
  }
  CodePointSet chars = *biggest;
  for (uint32_t c : classes) {
    const CodePointSet& d = grammar_->char_class(c);
    const size_t step_cost = chars.ranges().size() + d.ranges().size();
    cost += step_cost;
    if (cost > kMaxRunCheckRanges || !Charge(step_cost)) return -1;
    const CodePointSet outside = chars.Minus(d);
    if (!outside.empty() && outside.Size() != chars.Size()) chars = outside;
  }
  int printable = 0;
  for (uint32_t c = 0x20; c < 0x7F; ++c) printable += chars.Contains(c);
  if (printable < 48) return -1;
  const uint32_t representative = chars.Min();
  const int32_t set = FindOrAddRunSet(std::move(chars), vocab);
  if (set < 0 || !run_sets_[set].worth_it) return -1;
  Run run;
  run.set = static_cast<uint32_t>(set);
  run.representative = representative;
  run.states.push_back(state);
  run_bytes_ += sizeof(Run) + sizeof(int32_t);
  if (!Hold(sizeof(Run) + sizeof(int32_t))) return -1;
  runs_.push_back(std::move(run));
  return static_cast<int32_t>(runs_.size() - 1);
}

const Vocabulary::LoopTable* MatcherCore::RunTable(int32_t state, const Vocabulary& vocab) {
  if (loop_vocab_ != &vocab) {  // another vocabulary: decide again
    for (State& s : states_) s.run_decided = false, s.run = -1;
    runs_.clear();
    for (const RunSet& set : run_sets_) ranges_held_ -= set.chars.ranges().size();
    run_sets_.clear();
    Release(run_bytes_);
    run_bytes_ = 0;
    loop_vocab_ = &vocab;
  }
  State& s = states_[state];
  if (!s.run_decided) {
    s.run_decided = true;
    if (s.run < 0) {
      const int32_t run = StartRun(state, vocab);
      states_[state].run = run;
      states_[state].run_index = 0;
    }
  }
  const int32_t run = states_[state].run;
  return run < 0 ? nullptr : run_sets_[runs_[run].set].table.get();
}

void MatcherCore::ExtendRun(int32_t id, size_t upto) {
  while (runs_[id].states.size() <= upto && runs_[id].end == Run::kOpen && status_.ok()) {
    const int32_t last = runs_[id].states.back();
    if (!Uniform(last, run_sets_[runs_[id].set].chars)) {
      runs_[id].end = Run::kBroken;
      return;
    }
    const int32_t next = Next(last, runs_[id].representative);
    if (next == kError) return;
    Run& run = runs_[id];
    if (next == kDead) {
      run.end = Run::kDead;
    } else if (states_[next].run == id) {
      run.end = Run::kCycle;
      run.cycle_start = states_[next].run_index;
    } else if (states_[next].run >= 0) {
      run.end = Run::kBroken;  // joins another run: not followed
    } else {
      states_[next].run = id;
      states_[next].run_index = static_cast<uint32_t>(run.states.size());
      run.states.push_back(next);
      run_bytes_ += sizeof(int32_t);
      if (!Hold(sizeof(int32_t))) return;
    }
  }
}

int32_t MatcherCore::RunStateAfter(int32_t state, uint32_t n) {
  const int32_t id = states_[state].run;
  const size_t k = states_[state].run_index + size_t{n};
  ExtendRun(id, k);
  if (!status_.ok()) return kError;
  const Run& run = runs_[id];
  if (k < run.states.size()) return run.states[k];
  switch (run.end) {
    case Run::kDead: return kDead;
    case Run::kCycle: {
      const size_t period = run.states.size() - run.cycle_start;
      return run.states[run.cycle_start + (k - run.cycle_start) % period];
    }
    default: return kUnknown;
  }
}

const TokenBitset* MatcherCore::CachedMask(int32_t state, const void* vocab_key, uint32_t* worst_bytes_after) const {
  if (vocab_key != mask_vocab_) return nullptr;
  auto it = masks_.find(state);
  if (it == masks_.end()) return nullptr;
  if (worst_bytes_after != nullptr) *worst_bytes_after = mask_worst_.at(state);
  return &it->second;
}

void MatcherCore::CacheMask(int32_t state, const void* vocab_key, const TokenBitset& mask, uint32_t worst_bytes_after) {
  if (vocab_key != mask_vocab_ || masks_.size() >= limits_.max_cached_masks) {
    masks_.clear();
    mask_worst_.clear();
    Release(mask_bytes_);
    mask_bytes_ = 0;
    mask_vocab_ = vocab_key;
  }
  if (limits_.max_cached_masks == 0) return;
  const size_t bytes = kMaskOverheadBytes + mask.words().size() * sizeof(uint64_t);
  if (!Hold(bytes)) return;
  mask_bytes_ += bytes;
  masks_.emplace(state, mask);
  mask_worst_.emplace(state, worst_bytes_after);
}

}  // namespace niels::daemon::grammar
