#pragma once
// BpeModel: the merge step of byte-level BPE. Given the raw bytes of one pre-token it starts from
// one symbol per byte (the vocabulary piece that spells that byte) and repeatedly merges the
// adjacent pair with the lowest merge rank -- the leftmost one among equals -- until no adjacent
// pair has a merge, exactly as Hugging Face tokenizers' BPE model does. A heap of candidate pairs
// over a linked list of symbols makes one pre-token O(n log n) in its length n.
//
// Internal to BpeTokenizer. Immutable after Build;
// Encode is safe from any number of threads at once (each passes its own Scratch).

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/text/bpe_spec.h"
#include "daemon/text/flat_tables.h"

namespace niels::daemon::text {

class BpeModel {
 public:
  // Reusable buffers of one thread's Encode calls.
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev;  // index of the previous live symbol, -1 at the start
      int32_t next;  // index of the next live symbol, -1 at the end
    };
    // A merge of two adjacent symbols, as they were when it was pushed: it is stale once either
    // symbol has changed (merged with another neighbour).
    struct Candidate {
      int32_t rank;
      int32_t pos;        // index of the left symbol
      int32_t right_pos;  // index of the right symbol
      int32_t left_id;
      int32_t right_id;
      int32_t merged;     // the id the merge makes
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    std::string spelled;  // byte-level spelling of a pre-token (ignore_merges lookup)
  };

  BpeModel() = default;
  BpeModel(BpeModel&&) = delete;  // the index points into arena_ and offsets_
  BpeModel& operator=(BpeModel&&) = delete;

  // Builds the piece index (every id but kUnused ones) and the merge table from `pieces`, `types`
  // and spec.merges, spec.ignore_merges, spec.unk and spec.fuse_unk (spec.pieces and spec.types are
  // not read). INVALID_ARGUMENT naming the merge (its rank and pieces) if a merge's piece or result
  // is not in the vocabulary, or if unk is out of range.
  static common::StatusOr<std::unique_ptr<BpeModel>> Build(const std::vector<std::string>& pieces,
                                                           const std::vector<TokenType>& types, const BpeSpec& spec);

  // Appends the ids of the pre-token with raw bytes `bytes` to *ids.
  void Encode(std::string_view bytes, Scratch* scratch, std::vector<int32_t>* ids) const;

  // The id of a normal piece (byte-level spelling), if it is in the vocabulary.
  std::optional<int32_t> PieceId(std::string_view piece) const { return index_.Find(piece); }

 private:
  common::Status BuildMerges(const std::vector<std::string>& pieces, const BpeSpec& spec);
  void MergeSymbols(Scratch* scratch) const;
  void PushCandidate(Scratch* scratch, int32_t pos) const;

  std::string arena_;              // every piece, back to back (the index's keys)
  std::vector<uint32_t> offsets_;  // id -> start of its piece in arena_; one extra at the end
  std::vector<bool> indexed_;      // ids the index returns for their piece (not unused, not a repeat)
  PieceIndex index_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};  // the piece spelling each single byte, -1 if none
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false;
};

}  // namespace niels::daemon::text
