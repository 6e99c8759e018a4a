#include "daemon/grammar/matcher_core.h"

#include <algorithm>
#include <cstring>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

using Element = CompiledGrammar::Element;

MatcherCore::MatcherCore(std::shared_ptr<const CompiledGrammar> grammar, const MatcherLimits& limits)
    : grammar_(std::move(grammar)), limits_(limits) {}

int32_t MatcherCore::Fail(std::string message) {
  if (status_.ok()) status_ = common::Status::ResourceExhausted(std::move(message));
  return kError;
}

int32_t MatcherCore::Start() {
  if (start_ != kUnknown) return start_;
  if (!status_.ok()) return kError;
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  for (uint32_t alt : grammar_->alternatives(grammar_->root())) Expand(alt, kNoFrame);
  start_ = status_.ok() ? InternState() : kError;
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
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.empty() && !scratch_accepting_) return kDead;
  if (scratch_.size() > limits_.max_stacks_per_state) {
    return Fail(fmt::format("grammar matcher has more than {} parses alive at once",
                            limits_.max_stacks_per_state));
  }
  std::string key(scratch_.size() * sizeof(uint32_t) + 1, '\0');
  if (!scratch_.empty()) std::memcpy(key.data(), scratch_.data(), scratch_.size() * sizeof(uint32_t));
  key.back() = scratch_accepting_ ? 1 : 0;
  auto it = state_ids_.find(key);
  if (it != state_ids_.end()) return it->second;
  if (states_.size() >= limits_.max_states) {
    return Fail(fmt::format("grammar matcher needs more than {} states", limits_.max_states));
  }
  State s;
  s.stacks = scratch_;
  s.accepting = scratch_accepting_;
  s.min_bytes = s.accepting ? 0 : UINT32_MAX;
  std::fill(std::begin(s.ascii), std::end(s.ascii), kUnknown);
  std::vector<CodePointRange> ranges;
  std::vector<uint32_t> bounds = {0x80};
  for (uint32_t f : s.stacks) {
    s.min_bytes = std::min(s.min_bytes, frames_[f].min_bytes);
    const CodePointSet& cls = grammar_->char_class(grammar_->elements()[frames_[f].pos].arg);
    for (const CodePointRange& r : cls.ranges()) {
      ranges.push_back(r);
      if (r.lo > 0x80) bounds.push_back(r.lo);
      if (r.hi + 1 > 0x80 && r.hi < kMaxCodePoint) bounds.push_back(r.hi + 1);
    }
  }
  s.first = CodePointSet(std::move(ranges));
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  s.bounds = std::move(bounds);
  s.bound_next.assign(s.bounds.size(), kUnknown);
  states_.push_back(std::move(s));
  const auto id = static_cast<int32_t>(states_.size() - 1);
  state_ids_.emplace(std::move(key), id);
  return id;
}

int32_t MatcherCore::Step(int32_t state, uint32_t cp) {
  if (!status_.ok()) return kError;
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  const std::vector<Element>& elements = grammar_->elements();
  // Copy: Expand may grow frames_, and InternState states_.
  const std::vector<uint32_t> stacks = states_[state].stacks;
  for (uint32_t f : stacks) {
    const Frame frame = frames_[f];
    if (grammar_->char_class(elements[frame.pos].arg).Contains(cp)) Expand(frame.pos + 1, frame.parent);
    if (!status_.ok()) return kError;
  }
  return InternState();
}

int32_t MatcherCore::NextSlow(int32_t state, uint32_t cp) {
  const std::vector<uint32_t>& bounds = states_[state].bounds;
  const size_t i = std::upper_bound(bounds.begin(), bounds.end(), cp) - bounds.begin() - 1;
  int32_t next = states_[state].bound_next[i];
  if (next == kUnknown) {
    next = Step(state, cp);  // every code point of the interval leads to the same state
    states_[state].bound_next[i] = next;
  }
  return next;
}

uint32_t MatcherCore::MinBytesAfterCurrentChar(int32_t state) const {
  uint32_t best = UINT32_MAX;
  for (uint32_t f : states_[state].stacks) {
    const Frame& frame = frames_[f];
    const uint32_t cls = grammar_->elements()[frame.pos].arg;
    const uint32_t own = Utf8Length(grammar_->char_class(cls).Min());
    best = std::min(best, frame.min_bytes - std::min(frame.min_bytes, own));
  }
  return best;
}

// Every top class of the state either holds all of `chars` or none of them, so all of `chars` move
// the state the same way.
bool MatcherCore::Uniform(int32_t state, const CodePointSet& chars) const {
  for (uint32_t f : states_[state].stacks) {
    const CodePointSet& cls = grammar_->char_class(grammar_->elements()[frames_[f].pos].arg);
    const CodePointSet outside = chars.Minus(cls);
    if (!outside.empty() && outside.Size() != chars.Size()) return false;
  }
  return true;
}

// A new run from `state`: L is the state's largest top class less every part another top class
// splits off; worth it when L holds most printable ASCII and most tokens stay inside it.
int32_t MatcherCore::StartRun(int32_t state, const Vocabulary& vocab) {
  const std::vector<uint32_t>& stacks = states_[state].stacks;
  if (stacks.empty()) return -1;
  auto class_of = [&](uint32_t f) -> const CodePointSet& {
    return grammar_->char_class(grammar_->elements()[frames_[f].pos].arg);
  };
  const CodePointSet* biggest = &class_of(stacks[0]);
  for (uint32_t f : stacks) {
    if (class_of(f).Size() > biggest->Size()) biggest = &class_of(f);
  }
  CodePointSet chars = *biggest;
  for (uint32_t f : stacks) {
    const CodePointSet& d = class_of(f);
    const CodePointSet outside = chars.Minus(d);
    if (!outside.empty() && outside.Size() != chars.Size()) chars = outside;
  }
  int printable = 0;
  for (uint32_t c = 0x20; c < 0x7F; ++c) printable += chars.Contains(c);
  if (printable < 48) return -1;
  Run run;
  run.table = vocab.LoopTableFor(chars);
  if (run.table->exits.size() * 4 >= static_cast<size_t>(vocab.size())) return -1;
  run.representative = chars.Min();
  run.chars = std::move(chars);
  run.states.push_back(state);
  runs_.push_back(std::move(run));
  return static_cast<int32_t>(runs_.size() - 1);
}

const Vocabulary::LoopTable* MatcherCore::RunTable(int32_t state, const Vocabulary& vocab) {
  if (loop_vocab_ != &vocab) {  // another vocabulary: decide again
    for (State& s : states_) s.run_decided = false, s.run = -1;
    runs_.clear();
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
  return run < 0 ? nullptr : runs_[run].table.get();
}

void MatcherCore::ExtendRun(int32_t id, size_t upto) {
  while (runs_[id].states.size() <= upto && runs_[id].end == Run::kOpen && status_.ok()) {
    const int32_t last = runs_[id].states.back();
    if (!Uniform(last, runs_[id].chars)) {
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

const TokenBitset* MatcherCore::CachedMask(int32_t state, const void* vocab_key) const {
  if (vocab_key != mask_vocab_) return nullptr;
  auto it = masks_.find(state);
  return it == masks_.end() ? nullptr : &it->second;
}

void MatcherCore::CacheMask(int32_t state, const void* vocab_key, const TokenBitset& mask) {
  if (vocab_key != mask_vocab_ || masks_.size() >= limits_.max_cached_masks) {
    masks_.clear();
    mask_vocab_ = vocab_key;
  }
  if (limits_.max_cached_masks > 0) masks_.emplace(state, mask);
}

}  // namespace niels::daemon::grammar
