#include "daemon/text/bpe_model.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "daemon/text/byte_level.h"

namespace niels::daemon::text {
namespace {


// Heap order: the lowest rank on top, the leftmost among equal ranks.
bool Later(const BpeModel::Scratch::Candidate& a, const BpeModel::Scratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

}  // namespace

common::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Build(const std::vector<std::string>& pieces,
                                                             const std::vector<TokenType>& types,
                                                             const BpeSpec& spec) {
  auto model = std::make_unique<BpeModel>();
  size_t total = 0;
  for (const std::string& piece : pieces) total += piece.size();
  if (total >= (size_t{1} << 32)) return common::Status::InvalidArgument("the vocabulary's pieces exceed 4 GiB");
  model->arena_.reserve(total);
  model->offsets_.reserve(pieces.size() + 1);
  for (const std::string& piece : pieces) {
    model->offsets_.push_back(static_cast<uint32_t>(model->arena_.size()));
    model->arena_.append(piece);
  }
  model->offsets_.push_back(static_cast<uint32_t>(model->arena_.size()));
  // Added tokens are in the index too: Hugging Face keeps an added token that is also a vocabulary
  // piece (GPT-2's <|endoftext|>) in its model, and one that is not can never be a pre-token of the
  // known split patterns nor a merge of byte-level pieces.
  size_t count = 0;
  for (TokenType type : types) count += type != TokenType::kUnused ? 1 : 0;
  model->index_ = PieceIndex(&model->arena_, &model->offsets_, count);
  model->indexed_.assign(pieces.size(), false);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (types[id] != TokenType::kUnused) model->indexed_[id] = model->index_.Insert(static_cast<int32_t>(id));
  }
  std::string spelled;
  for (int b = 0; b < 256; ++b) {
    spelled.clear();
    const char byte = static_cast<char>(b);
    AppendByteLevel(std::string_view(&byte, 1), &spelled);
    model->byte_ids_[static_cast<size_t>(b)] = model->index_.Find(spelled).value_or(-1);
  }
  NIELS_RETURN_IF_ERROR(model->BuildMerges(pieces, spec));
  if (spec.unk && (*spec.unk < 0 || static_cast<size_t>(*spec.unk) >= pieces.size())) {
    return common::Status::InvalidArgument(fmt::format("unknown token id {} is out of range", *spec.unk));
  }
  model->ignore_merges_ = spec.ignore_merges;
  model->unk_ = spec.unk;
  model->fuse_unk_ = spec.fuse_unk;
  return model;
}

common::Status BpeModel::BuildMerges(const std::vector<std::string>& pieces, const BpeSpec& spec) {
  merges_ = MergeTable(spec.merges.size());
  // In batches: hash the batch's pieces and prefetch their index slots, resolve the ids, prefetch
  // the merge slots, insert. Loading Llama 3's 280k merges waits for its cache misses a batch at a
  // time rather than one after another.
  constexpr size_t kBatch = 32;
  struct Resolved {
    uint64_t left_hash, right_hash;
    std::optional<int32_t> left, right, merged;
  };
  std::array<Resolved, kBatch> batch;
  std::string joined;
  for (size_t start = 0; start < spec.merges.size(); start += kBatch) {
    const size_t end = std::min(spec.merges.size(), start + kBatch);
    for (size_t rank = start; rank < end; ++rank) {
      Resolved& r = batch[rank - start];
      r.left_hash = PieceIndex::Hash(spec.merges[rank].first);
      r.right_hash = PieceIndex::Hash(spec.merges[rank].second);
      index_.Prefetch(r.left_hash);
      index_.Prefetch(r.right_hash);
    }
    for (size_t rank = start; rank < end; ++rank) {
      Resolved& r = batch[rank - start];
      const auto& [left, right] = spec.merges[rank];
      r.left = index_.FindHashed(left, r.left_hash);
      r.right = index_.FindHashed(right, r.right_hash);
      // Vocabularies trained by BPE list the merged piece of rank r at id 256 + r: try that first
      // (when that id is the one the index holds for its piece, it is what Find would return).
      const size_t guess = 256 + rank;
      if (guess < pieces.size() && indexed_[guess] && pieces[guess].size() == left.size() + right.size() &&
          pieces[guess].starts_with(left) && pieces[guess].ends_with(right)) {
        r.merged = static_cast<int32_t>(guess);
      } else {
        r.merged = index_.Find(joined.assign(left).append(right));
      }
      if (!r.left || !r.right || !r.merged) {
        joined.assign(left).append(right);
        const std::string& missing = !r.left ? left : !r.right ? right : joined;
        return common::Status::InvalidArgument(fmt::format(
            "merge {} (\"{}\" \"{}\"): \"{}\" is not in the vocabulary", rank, left, right, missing));
      }
      merges_.Prefetch(*r.left, *r.right);
    }
    for (size_t rank = start; rank < end; ++rank) {
      const Resolved& r = batch[rank - start];
      merges_.Put(*r.left, *r.right, MergeTable::Merge{static_cast<int32_t>(rank), *r.merged});
    }
  }
  return common::Status::Ok();
}

void BpeModel::PushCandidate(Scratch* scratch, int32_t pos) const {
  const Scratch::Symbol& left = scratch->symbols[static_cast<size_t>(pos)];
  if (left.next < 0) return;
  const int32_t right_id = scratch->symbols[static_cast<size_t>(left.next)].id;
  const MergeTable::Merge* merge = merges_.Find(left.id, right_id);
  if (merge == nullptr) return;
  scratch->heap.push_back({merge->rank, pos, left.next, left.id, right_id, merge->merged});
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
    if (left.id != top.left_id || left.next != top.right_pos) continue;  // a stale candidate
    Scratch::Symbol& right = symbols[static_cast<size_t>(top.right_pos)];
    if (right.id != top.right_id) continue;
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
