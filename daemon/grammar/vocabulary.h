#pragma once
// Vocabulary: what the matcher needs to know about a tokenizer's tokens, independent of any
// tokenizer class -- the byte string of every id, and which ids are special -- plus a byte trie of
// all of them, built once (per model) so that a mask checks shared prefixes once.
//
// Byte-level BPE tokens are fixed byte strings (possibly a piece of a UTF-8 character). Special
// ids have no bytes: kEndOfOutput ids (end of turn, end of text) are allowed exactly where the
// output is complete; kNever ids (chat-template markers and the like) are never allowed. An
// ordinary token with no bytes is never allowed either (it could be sampled forever).
// Immutable after Create (but for LoopTableFor's internal, mutex-guarded, bounded cache); share it
// (shared_ptr) between every matcher of the model and any threads.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/grammar/code_point_set.h"
#include "daemon/grammar/token_bitset.h"

namespace niels::daemon::grammar {

enum class TokenKind : uint8_t { kText, kEndOfOutput, kNever };

struct VocabularyToken {
  std::string bytes;  // ignored unless kind == kText
  TokenKind kind = TokenKind::kText;
};

class Vocabulary {
 public:
  // One node of the trie, in preorder (the root, the empty string, is not stored).
  struct TrieNode {
    uint8_t byte = 0;           // the byte that leads here from the parent
    uint16_t depth = 0;         // 1 for the root's children
    int32_t token = -1;         // a token whose bytes end here (others: same_bytes_next), or -1
    uint32_t subtree_end = 0;   // index of the first node after this node's subtree
  };
  static constexpr size_t kMaxTokenBytes = 65535;

  // INVALID_ARGUMENT: more than 2^31 - 1 tokens, or a token longer than kMaxTokenBytes.
  static common::StatusOr<std::shared_ptr<const Vocabulary>> Create(std::vector<VocabularyToken> tokens);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const VocabularyToken& token(int32_t id) const { return tokens_[id]; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  // The next id with the same bytes as `id`, or -1 (duplicates in a vocabulary do happen).
  int32_t same_bytes_next(int32_t id) const { return same_next_[id]; }
  const std::vector<int32_t>& end_of_output_ids() const { return end_ids_; }
  size_t max_token_bytes() const { return max_len_; }
  // Every byte that can occur in UTF-8 text (0x00-0xBF, 0xC2-0xF4) is the whole text of some id,
  // so any text can be spelled one byte per id (byte-level BPE; SentencePiece with byte fallback).
  bool every_byte_is_a_token() const { return every_byte_; }
  // The trie node (index into trie()) of the one-byte string `b`, or -1 when no token starts with b.
  int32_t root_child(uint8_t b) const { return root_child_[b]; }

  // The text tokens split by a set of characters L (a run of matcher states that all move the same
  // way on every character of L, like the inside of a JSON string): `inside` holds the tokens made
  // only of whole characters of L, also listed by their number of characters; every other text
  // token is in `exits` with the byte offset of its first character that is not a whole character
  // of L (invalid or incomplete UTF-8 included) and the number of characters before it. Building
  // one costs a pass over every token's bytes (O(total token bytes x log ranges of L)).
  //
  // The tables are kept in one cache per vocabulary, shared by every matcher (every request) of
  // the model: at most kMaxLoopTables tables and kMaxLoopTableCacheBytes bytes (the tables and
  // their keys, the ranges of L), least recently used out first; a table larger than the byte
  // bound is built and returned but not kept. So no request can pin the cache: a set used again
  // moves to the front, and a request that brings many new sets only pushes out the ones used
  // least recently (each comes back at the cost of one build). Thread-safe.
  struct LoopExit {
    int32_t id;
    uint32_t offset;  // bytes before the exit
    uint32_t chars;   // characters of L before the exit
  };
  struct LoopTable {
    TokenBitset inside;
    std::vector<std::vector<int32_t>> inside_by_chars;  // [n]: inside tokens of n characters
    std::vector<LoopExit> exits;
    uint32_t max_chars = 0;  // most characters of L before the end or exit of any token
  };
  static constexpr size_t kMaxLoopTables = 64;
  static constexpr size_t kMaxLoopTableCacheBytes = size_t{64} << 20;
  std::shared_ptr<const LoopTable> LoopTableFor(const CodePointSet& loop) const;

  // What the loop-table cache holds now and has done since Create.
  struct LoopTableCacheStats {
    size_t tables = 0;    // <= kMaxLoopTables
    size_t bytes = 0;     // <= kMaxLoopTableCacheBytes
    uint64_t builds = 0;  // LoopTableFor calls that built a table (the set was not cached)
    uint64_t hits = 0;    // LoopTableFor calls answered from the cache
    uint64_t evictions = 0;
  };
  LoopTableCacheStats loop_table_cache_stats() const;

 private:
  Vocabulary() = default;

  using LoopKey = std::vector<std::pair<uint32_t, uint32_t>>;  // the ranges of L
  struct LoopCacheEntry {
    std::shared_ptr<const LoopTable> table;
    size_t bytes = 0;       // the table's and the key's
    uint64_t last_use = 0;  // loop_clock_ at the last lookup
  };
  mutable std::mutex loop_mutex_;
  mutable std::map<LoopKey, LoopCacheEntry> loop_tables_;
  mutable uint64_t loop_clock_ = 0;
  mutable LoopTableCacheStats loop_stats_;

  std::vector<VocabularyToken> tokens_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> same_next_;
  std::vector<int32_t> end_ids_;
  size_t max_len_ = 0;
  bool every_byte_ = false;
  int32_t root_child_[256];
};

}  // namespace niels::daemon::grammar
