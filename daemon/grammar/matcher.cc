#include "daemon/grammar/matcher.h"

#include <vector>

#include "fmt/format.h"

namespace niels::daemon::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, const MatcherLimits& limits)
    : core_(std::make_shared<MatcherCore>(std::move(grammar), limits)) {
  now_.state = core_->Start();
}

bool Matcher::Advance(uint8_t byte, Snapshot* at) {
  if (at->ended || at->state < 0) return false;
  PartialChar& p = at->partial;
  if (!p.active()) {
    if (byte < 0x80) {
      const int32_t next = core_->Next(at->state, byte);
      if (next < 0) return false;
      at->state = next;
      return true;
    }
    PartialChar started;
    if (!StartPartial(byte, &started) || !core_->CanTakeAnyOf(at->state, started.Low(), started.High())) {
      return false;
    }
    p = started;
    return true;
  }
  PartialChar cont = p;
  if (!ContinuePartial(byte, &cont)) return false;
  if (cont.active()) {
    if (!core_->CanTakeAnyOf(at->state, cont.Low(), cont.High())) return false;
    p = cont;
    return true;
  }
  const int32_t next = core_->Next(at->state, cont.value);
  if (next < 0) return false;
  at->state = next;
  p = PartialChar();
  return true;
}

common::Status Matcher::AcceptBytes(std::string_view bytes) {
  common::Status status = Advance(bytes);
  core_->EndTokenWindow();
  return status;
}

common::Status Matcher::Advance(std::string_view bytes) {
  NIELS_RETURN_IF_ERROR(core_->status());
  Snapshot s = now_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!Advance(static_cast<uint8_t>(bytes[i]), &s)) {
      NIELS_RETURN_IF_ERROR(core_->status());
      return common::Status::InvalidArgument(fmt::format(
          "byte {} (0x{:02X}) is not allowed by the grammar here", i, static_cast<uint8_t>(bytes[i])));
    }
  }
  now_ = s;
  return common::Status::Ok();
}

common::Status Matcher::AcceptToken(int32_t id, const Vocabulary& vocab) {
  NIELS_RETURN_IF_ERROR(core_->status());
  if (id < 0 || id >= vocab.size()) {
    return common::Status::InvalidArgument(fmt::format("token id {} outside the vocabulary", id));
  }
  const VocabularyToken& t = vocab.token(id);
  if (t.kind == TokenKind::kEndOfOutput) {
    if (!IsComplete()) {
      return common::Status::InvalidArgument(
          fmt::format("end-of-output token {} before the grammar is complete", id));
    }
    now_.ended = true;
    return common::Status::Ok();
  }
  if (t.kind == TokenKind::kNever || t.bytes.empty()) {
    return common::Status::InvalidArgument(fmt::format("token {} is never allowed by a grammar", id));
  }
  return AcceptBytes(t.bytes);
}

bool Matcher::IsComplete() const {
  return now_.state >= 0 && !now_.ended && !now_.partial.active() && core_->Accepting(now_.state);
}

bool Matcher::CanContinue() const {
  return now_.state >= 0 && !now_.ended && (now_.partial.active() || core_->HasStacks(now_.state));
}

uint32_t Matcher::MinBytesToComplete() const {
  if (now_.state < 0 || now_.ended) return 0;
  if (!now_.partial.active()) return core_->MinBytes(now_.state);
  return now_.partial.remaining +
         core_->MinBytesAfterCurrentChar(now_.state, now_.partial.Low(), now_.partial.High());
}

std::bitset<256> Matcher::AllowedBytes() {
  std::bitset<256> out;
  for (int b = 0; b < 256; ++b) {
    Snapshot s = now_;
    if (Advance(static_cast<uint8_t>(b), &s)) out.set(b);
  }
  return out;
}

uint32_t Matcher::MinBytesAt(const Snapshot& s) {
  if (s.state < 0) return kNoBound;
  if (s.ended) return 0;
  if (!s.partial.active()) return core_->MinBytes(s.state);
  const uint32_t rest = core_->MinBytesAfterCurrentChar(s.state, s.partial.Low(), s.partial.High());
  if (rest >= kNoBound - 8) return kNoBound;
  return rest + s.partial.remaining;
}

uint32_t Matcher::BoundAt(const Snapshot& s, const Vocabulary& after, const uint32_t* limit) {
  if (s.state < 0 || s.ended) return kNoBound;
  if (s.partial.active()) return after.every_byte_is_a_token() ? MinBytesAt(s) : kNoBound;
  if (core_->Accepting(s.state)) return 0;
  const uint32_t bytes = after.every_byte_is_a_token() ? core_->MinBytes(s.state) : kNoBound;
  if (limit != nullptr) {
    if (bytes <= *limit) return bytes;
    // S >= the bytes over the longest id: it cannot fit either.
    if (uint64_t{core_->MinBytes(s.state)} > uint64_t{*limit} * after.max_token_bytes()) return bytes;
  }
  return std::min(bytes, core_->SpellBound(s.state, after));
}

uint32_t Matcher::CompletionBound(const Vocabulary& after) { return BoundAt(now_, after, nullptr); }

common::Status Matcher::AllowedTokens(const Vocabulary& vocab, TokenBitset* out) {
  uint32_t worst = 0;
  return MaskAndWorst(vocab, out, &worst);
}

common::Status Matcher::MaskAndWorst(const Vocabulary& vocab, TokenBitset* out, uint32_t* worst) {
  out->Reset(vocab.size());
  *worst = 0;
  NIELS_RETURN_IF_ERROR(core_->status());
  if (now_.ended || now_.state < 0) return common::Status::Ok();
  const bool cacheable = !now_.partial.active();
  if (cacheable) {
    if (const TokenBitset* hit = core_->CachedMask(now_.state, &vocab, worst)) {
      *out = *hit;
      return common::Status::Ok();
    }
  }
  ComputeMask(vocab, nullptr, out, worst);
  NIELS_RETURN_IF_ERROR(core_->status());
  if (IsComplete()) {
    for (int32_t id : vocab.end_of_output_ids()) out->Set(id);
  }
  if (cacheable) core_->CacheMask(now_.state, &vocab, *out, *worst);
  return common::Status::Ok();
}

common::Status Matcher::AllowedTokensWithin(const Vocabulary& vocab, const Vocabulary& after, uint32_t max_tokens_after,
                                            TokenBitset* out, bool* narrowed) {
  if (narrowed != nullptr) *narrowed = false;
  uint32_t worst = 0;
  NIELS_RETURN_IF_ERROR(MaskAndWorst(vocab, out, &worst));
  if (now_.ended || now_.state < 0) return common::Status::Ok();
  if (after.every_byte_is_a_token() && worst <= max_tokens_after) return common::Status::Ok();  // all leave room
  TokenBitset within;
  const Budget budget{&after, max_tokens_after};
  ComputeMask(vocab, &budget, &within, nullptr);
  NIELS_RETURN_IF_ERROR(core_->status());
  if (IsComplete()) {
    for (int32_t id : vocab.end_of_output_ids()) within.Set(id);
  }
  if (within.Count() == 0) return common::Status::Ok();  // no completion the bound sees fits: unbounded
  if (narrowed != nullptr) *narrowed = within != *out;
  *out = std::move(within);
  return common::Status::Ok();
}

void Matcher::ComputeMask(const Vocabulary& vocab, const Budget* budget, TokenBitset* out, uint32_t* worst) {
  out->Reset(vocab.size());
  if (worst != nullptr) *worst = 0;
  const bool cacheable = !now_.partial.active();
  const Vocabulary::LoopTable* run = cacheable ? core_->RunTable(now_.state, vocab) : nullptr;
  if (run == nullptr || !MaskFromRun(*run, vocab, out, budget, worst)) {
    out->Reset(vocab.size());
    if (worst != nullptr) *worst = 0;
    WalkTrie(vocab, out, budget, worst);
  }
}

// Walks the vocabulary trie in preorder, advancing a copy of the state per node; a node whose byte
// is not allowed skips its whole subtree. Only ids of kText tokens are in the trie.
void Matcher::WalkTrie(const Vocabulary& vocab, TokenBitset* out, const Budget* budget, uint32_t* worst) {
  const std::vector<Vocabulary::TrieNode>& trie = vocab.trie();
  std::vector<Snapshot> at(vocab.max_token_bytes() + 1);
  at[0] = now_;
  const size_t n = trie.size();
  uint64_t visited = 0;
  for (size_t i = 0; i < n;) {
    const Vocabulary::TrieNode& node = trie[i];
    ++visited;
    Snapshot s = at[node.depth - 1];
    if (!Advance(node.byte, &s)) {
      if (!core_->status().ok()) break;
      i = node.subtree_end;
      continue;
    }
    at[node.depth] = s;
    if (node.token >= 0) {
      if (worst != nullptr) *worst = std::max(*worst, MinBytesAt(s));
      if (budget == nullptr || Fits(s, *budget)) {
        for (int32_t id = node.token; id >= 0; id = vocab.same_bytes_next(id)) out->Set(id);
      }
    }
    ++i;
  }
  core_->CountTrieNodes(visited);
}

bool Matcher::MaskFromRun(const Vocabulary::LoopTable& table, const Vocabulary& vocab, TokenBitset* out,
                          const Budget* budget, uint32_t* worst) {
  // alive: the run's states after 0..alive characters all exist (the dead state absorbs).
  uint32_t alive = 0;
  while (alive < table.max_chars) {
    const int32_t next = core_->RunStateAfter(now_.state, alive + 1);
    if (next == MatcherCore::kUnknown || next == MatcherCore::kError) return false;
    if (next == MatcherCore::kDead) break;
    ++alive;
  }
  // Inside tokens of n characters all lead to the run's state after n characters: they are taken
  // together (n <= alive, and with a budget when that state leaves room). Set the taken ones or
  // clear the others, whichever touches fewer ids.
  const auto& by_chars = table.inside_by_chars;
  std::vector<bool> take(by_chars.size(), false);
  size_t short_ones = 0, long_ones = 0;
  for (size_t n = 0; n < by_chars.size(); ++n) {
    take[n] = n <= alive;
    if (take[n] && n > 0 && !by_chars[n].empty()) {
      Snapshot s;
      s.state = core_->RunStateAfter(now_.state, static_cast<uint32_t>(n));
      if (worst != nullptr) *worst = std::max(*worst, MinBytesAt(s));
      if (budget != nullptr) take[n] = Fits(s, *budget);
      if (!core_->status().ok()) return true;  // the caller reports the error
    }
    (take[n] ? short_ones : long_ones) += by_chars[n].size();
  }
  if (long_ones <= short_ones) {
    *out = table.inside;
    for (size_t n = 0; n < by_chars.size(); ++n) {
      if (take[n]) continue;
      for (int32_t id : by_chars[n]) out->Clear(id);
    }
  } else {
    for (size_t n = 1; n < by_chars.size(); ++n) {
      if (!take[n]) continue;
      for (int32_t id : by_chars[n]) out->Set(id);
    }
  }
  // Exits: the characters before the exit lead along the run; the rest is advanced from there.
  core_->CountTrieNodes(table.exits.size());
  for (const Vocabulary::LoopExit& e : table.exits) {
    if (e.chars > alive) continue;
    Snapshot s;
    s.state = e.chars == 0 ? now_.state : core_->RunStateAfter(now_.state, e.chars);
    const std::string& bytes = vocab.token(e.id).bytes;
    bool ok = true;
    for (size_t i = e.offset; i < bytes.size() && ok; ++i) ok = Advance(static_cast<uint8_t>(bytes[i]), &s);
    if (ok) {
      if (worst != nullptr) *worst = std::max(*worst, MinBytesAt(s));
      if (budget == nullptr || Fits(s, *budget)) out->Set(e.id);
    } else if (!core_->status().ok()) {
      return true;  // the caller reports the error
    }
  }
  return true;
}

}  // namespace niels::daemon::grammar
