#pragma once
// A deliberately naive BPE merge on strings, the oracle the tests and the tokenizer_json fuzz
// target hold BpeModel (heap + linked list over ids) to: spell each byte of a pre-token, then
// repeatedly merge the adjacent pair with the lowest rank (the leftmost among equals) until none
// has a rank, and look the pieces up. O(n^2) per pre-token: for short inputs only.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/text/bpe_spec.h"
#include "daemon/text/byte_level.h"

namespace niels::daemon::text::testing {

class NaiveBpe {
 public:
  explicit NaiveBpe(const BpeSpec& spec) : ignore_merges_(spec.ignore_merges) {
    for (size_t id = 0; id < spec.pieces.size(); ++id) {
      if (spec.types[id] != TokenType::kUnused) ids_.emplace(spec.pieces[id], static_cast<int32_t>(id));
    }
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) ranks_[spec.merges[rank]] = static_cast<int>(rank);
  }

  // The ids of one pre-token given as raw bytes. Bytes without a piece are dropped (no unk).
  std::vector<int32_t> Encode(std::string_view bytes) const {
    std::string whole;
    AppendByteLevel(bytes, &whole);
    if (ignore_merges_ && ids_.count(whole)) return {ids_.at(whole)};
    std::vector<std::string> symbols;
    for (char c : bytes) {
      std::string spelled;
      AppendByteLevel(std::string_view(&c, 1), &spelled);
      if (ids_.count(spelled)) symbols.push_back(spelled);
    }
    for (;;) {
      int best_rank = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks_.find({symbols[i], symbols[i + 1]});
        if (it != ranks_.end() && (best_rank < 0 || it->second < best_rank)) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank < 0) break;
      symbols[best] += symbols[best + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<int32_t> out;
    for (const auto& s : symbols) out.push_back(ids_.at(s));
    return out;
  }

 private:
  bool ignore_merges_;
  std::map<std::string, int32_t> ids_;  // first id of each piece
  std::map<std::pair<std::string, std::string>, int> ranks_;  // a repeated pair keeps its last rank
};

}  // namespace niels::daemon::text::testing
