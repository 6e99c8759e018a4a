#include "daemon/text/bpe_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/text/byte_level.h"

namespace niels::daemon::text {
namespace {


// Heap order: the lowest rank on top, the leftmost among equal ranks.
bool Later(const BpeModel::Scratch::Candidate& a, const BpeModel::Scratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

}  // namespace

common::StatusOr<BpeModel> BpeModel::Build(const std::vector<std::string>& pieces,
                                            const std::vector<TokenType>& types, const BpeSpec& spec) {
  BpeModel model;
  // Added tokens are in the index too: Hugging Face keeps an added token that is also a vocabulary
  // piece (GPT-2's <|endoftext|>) in its model, and one that is not can never be a pre-token of the
  // known split patterns nor a merge of byte-level pieces.
  size_t count = 0;
  for (TokenType type : types) count += type != TokenType::kUnused ? 1 : 0;
  model.index_ = PieceIndex(&pieces, count);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (types[id] != TokenType::kUnused) model.index_.Insert(static_cast<int32_t>(id));
  }
  std::string spelled;
  for (int b = 0; b < 256; ++b) {
    spelled.clear();
    const char byte = static_cast<char>(b);
    AppendByteLevel(std::string_view(&byte, 1), &spelled);
    model.byte_ids_[static_cast<size_t>(b)] = model.index_.Find(spelled).value_or(-1);
  }
  model.merges_ = MergeTable(spec.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto left_id = model.index_.Find(left);
    const auto right_id = model.index_.Find(right);
    joined.assign(left).append(right);
    const auto merged_id = model.index_.Find(joined);
    if (!left_id || !right_id || !merged_id) {
      const std::string& missing = !left_id ? left : !right_id ? right : joined;
      return common::Status::InvalidArgument(fmt::format(
          "merge {} (\"{}\" \"{}\"): \"{}\" is not in the vocabulary", rank, left, right, missing));
    }
    model.merges_.Put(*left_id, *right_id, MergeTable::Merge{static_cast<int32_t>(rank), *merged_id});
  }
  if (spec.unk && (*spec.unk < 0 || static_cast<size_t>(*spec.unk) >= pieces.size())) {
    return common::Status::InvalidArgument(fmt::format("unknown token id {} is out of range", *spec.unk));
  }
  model.ignore_merges_ = spec.ignore_merges;
  model.unk_ = spec.unk;
  model.fuse_unk_ = spec.fuse_unk;
  return model;
}

void BpeModel::PushCandidate(Scratch* scratch, int32_t pos) const {
  const Scratch::Symbol& left = scratch->symbols[static_cast<size_t>(pos)];
  if (left.next < 0) return;
  const MergeTable::Merge* merge = merges_.Find(left.id, scratch->symbols[static_cast<size_t>(left.next)].id);
  if (merge == nullptr) return;
  scratch->heap.push_back({merge->rank, pos, merge->merged});
  std::push_heap(scratch->heap.begin(), scratch->heap.end(), Later);
}

void BpeModel::MergeSymbols(Scratch* scratch) const {
  auto& symbols = scratch->symbols;
  auto& heap = scratch->heap;
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)].prev = i - 1;
    symbols[static_cast<size_t>(i)].next = i + 1 < n ? i + 1 : -1;
  }
  heap.clear();
  for (int32_t i = 0; i + 1 < n; ++i) PushCandidate(scratch, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later);
    const Scratch::Candidate top = heap.back();
    heap.pop_back();
    Scratch::Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.id < 0 || left.next < 0) continue;  // merged away, or nothing to its right any more
    Scratch::Symbol& right = symbols[static_cast<size_t>(left.next)];
    const MergeTable::Merge* merge = merges_.Find(left.id, right.id);
    if (merge == nullptr || merge->merged != top.merged) continue;  // a stale candidate
    left.id = top.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    right.id = -1;
    if (left.prev >= 0) PushCandidate(scratch, left.prev);
    PushCandidate(scratch, top.pos);
  }
}

void BpeModel::Encode(std::string_view bytes, Scratch* scratch, std::vector<int32_t>* ids) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    scratch->spelled.clear();
    AppendByteLevel(bytes, &scratch->spelled);
    if (const auto id = index_.Find(scratch->spelled)) {
      ids->push_back(*id);
      return;
    }
  }
  auto& symbols = scratch->symbols;
  symbols.clear();
  bool last_was_unk = false;
  for (char c : bytes) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      symbols.push_back({id, -1, -1});
      last_was_unk = false;
    } else if (unk_) {  // a byte the vocabulary cannot spell (never in a complete byte-level vocabulary)
      if (!(fuse_unk_ && last_was_unk)) symbols.push_back({*unk_, -1, -1});
      last_was_unk = true;
    }  // else dropped, as Hugging Face's BPE does without an unknown token
  }
  if (symbols.size() > 1) MergeSymbols(scratch);
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    ids->push_back(symbols[static_cast<size_t>(i)].id);
  }
}

}  // namespace niels::daemon::text
