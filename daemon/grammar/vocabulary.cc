#include "daemon/grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "daemon/grammar/utf8.h"
#include "fmt/format.h"

namespace niels::daemon::grammar {

common::StatusOr<std::shared_ptr<const Vocabulary>> Vocabulary::Create(std::vector<VocabularyToken> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return common::Status::InvalidArgument(fmt::format("vocabulary too large: {} tokens", tokens.size()));
  }
  std::shared_ptr<Vocabulary> v(new Vocabulary());
  v->tokens_ = std::move(tokens);
  const int32_t n = v->size();
  v->same_next_.assign(n, -1);
  std::vector<int32_t> text_ids;
  for (int32_t id = 0; id < n; ++id) {
    const VocabularyToken& t = v->tokens_[id];
    if (t.kind == TokenKind::kEndOfOutput) v->end_ids_.push_back(id);
    if (t.kind != TokenKind::kText || t.bytes.empty()) continue;
    if (t.bytes.size() > kMaxTokenBytes) {
      return common::Status::InvalidArgument(fmt::format(
          "vocabulary token {} has {} bytes (the limit is {})", id, t.bytes.size(), kMaxTokenBytes));
    }
    v->max_len_ = std::max(v->max_len_, t.bytes.size());
    text_ids.push_back(id);
  }
  // Sorted by bytes, then id. Each id carries its first 8 bytes as a big-endian number (zero-padded:
  // that orders like the strings themselves), so most comparisons touch no string: a third of the
  // time for a 151,936-token vocabulary.
  using Key = std::pair<uint64_t, int32_t>;  // (first 8 bytes, id)
  std::vector<Key> keys;
  keys.reserve(text_ids.size());
  for (int32_t id : text_ids) {
    const std::string& b = v->tokens_[id].bytes;
    uint64_t key = 0;
    for (size_t i = 0; i < 8; ++i) key = (key << 8) | (i < b.size() ? static_cast<uint8_t>(b[i]) : 0);
    keys.emplace_back(key, id);
  }
  std::sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
    if (a.first != b.first) return a.first < b.first;
    const std::string& x = v->tokens_[a.second].bytes;
    const std::string& y = v->tokens_[b.second].bytes;
    return x != y ? x < y : a.second < b.second;  // std::string compares bytes as unsigned char
  });
  for (size_t i = 0; i < keys.size(); ++i) text_ids[i] = keys[i].second;
  // Preorder construction from the sorted strings: each one adds nodes below its common prefix
  // with the previous one; a node's subtree ends where the next node of its depth or less begins.
  std::vector<uint32_t> open;  // open[d - 1] = index of the open node at depth d
  const std::string* prev = nullptr;
  int32_t prev_id = -1;
  for (int32_t id : text_ids) {
    const std::string& s = v->tokens_[id].bytes;
    if (prev != nullptr && *prev == s) {
      v->same_next_[prev_id] = id;  // chain duplicates behind the first
      prev_id = id;
      continue;
    }
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    while (open.size() > lcp) {
      v->trie_[open.back()].subtree_end = static_cast<uint32_t>(v->trie_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      open.push_back(static_cast<uint32_t>(v->trie_.size()));
      v->trie_.push_back(node);
    }
    v->trie_[open.back()].token = id;
    prev = &s;
    prev_id = id;
  }
  for (uint32_t i : open) v->trie_[i].subtree_end = static_cast<uint32_t>(v->trie_.size());
  std::fill(std::begin(v->root_child_), std::end(v->root_child_), -1);
  for (size_t i = 0; i < v->trie_.size(); i = v->trie_[i].subtree_end) v->root_child_[v->trie_[i].byte] = static_cast<int32_t>(i);
  v->every_byte_ = true;
  for (int b = 0; b < 256; ++b) {
    if (b == 0xC0 || b == 0xC1 || b > 0xF4) continue;  // never in UTF-8
    const int32_t node = v->root_child_[b];
    if (node < 0 || v->trie_[node].token < 0) v->every_byte_ = false;
  }
  return std::shared_ptr<const Vocabulary>(std::move(v));
}

namespace {

// The heap bytes of a loop table (capacities, as allocated) and of its cache key.
size_t LoopTableBytes(const Vocabulary::LoopTable& table, size_t key_ranges) {
  size_t bytes = sizeof(Vocabulary::LoopTable) + table.inside.words().capacity() * sizeof(uint64_t) +
                 table.inside_by_chars.capacity() * sizeof(std::vector<int32_t>) +
                 table.exits.capacity() * sizeof(Vocabulary::LoopExit);
  for (const std::vector<int32_t>& ids : table.inside_by_chars) bytes += ids.capacity() * sizeof(int32_t);
  return bytes + key_ranges * sizeof(std::pair<uint32_t, uint32_t>);
}

}  // namespace

std::shared_ptr<const Vocabulary::LoopTable> Vocabulary::LoopTableFor(const CodePointSet& loop) const {
  LoopKey key;
  key.reserve(loop.ranges().size());
  for (const CodePointRange& r : loop.ranges()) key.emplace_back(r.lo, r.hi);
  {
    std::lock_guard<std::mutex> lock(loop_mutex_);
    auto it = loop_tables_.find(key);
    if (it != loop_tables_.end()) {
      it->second.last_use = ++loop_clock_;
      ++loop_stats_.hits;
      return it->second.table;
    }
  }
  auto table = std::make_shared<LoopTable>();
  table->inside.Reset(size());
  for (int32_t id = 0; id < size(); ++id) {
    const VocabularyToken& t = tokens_[id];
    if (t.kind != TokenKind::kText || t.bytes.empty()) continue;
    size_t pos = 0;
    uint32_t cp = 0, chars = 0;
    while (pos < t.bytes.size()) {
      const size_t start = pos;
      if (!DecodeUtf8(t.bytes, &pos, &cp) || !loop.Contains(cp)) {
        pos = start;
        break;
      }
      ++chars;
    }
    table->max_chars = std::max(table->max_chars, chars);
    if (pos == t.bytes.size()) {
      table->inside.Set(id);
      if (table->inside_by_chars.size() <= chars) table->inside_by_chars.resize(chars + 1);
      table->inside_by_chars[chars].push_back(id);
    } else {
      table->exits.push_back({id, static_cast<uint32_t>(pos), chars});
    }
  }
  const size_t bytes = LoopTableBytes(*table, key.size());
  std::lock_guard<std::mutex> lock(loop_mutex_);
  ++loop_stats_.builds;
  if (bytes > kMaxLoopTableCacheBytes) return table;
  auto [it, inserted] = loop_tables_.try_emplace(std::move(key));
  if (!inserted) {  // another thread built the same set meanwhile: keep the cached one
    it->second.last_use = ++loop_clock_;
    return it->second.table;
  }
  it->second = {table, bytes, ++loop_clock_};
  loop_stats_.bytes += bytes;
  // Least recently used out until both bounds hold (the new table, the most recent, stays).
  while (loop_tables_.size() > kMaxLoopTables || loop_stats_.bytes > kMaxLoopTableCacheBytes) {
    auto oldest = loop_tables_.end();
    for (auto e = loop_tables_.begin(); e != loop_tables_.end(); ++e) {
      if (e != it && (oldest == loop_tables_.end() || e->second.last_use < oldest->second.last_use)) oldest = e;
    }
    loop_stats_.bytes -= oldest->second.bytes;
    loop_tables_.erase(oldest);
    ++loop_stats_.evictions;
  }
  loop_stats_.tables = loop_tables_.size();
  return table;
}

Vocabulary::LoopTableCacheStats Vocabulary::loop_table_cache_stats() const {
  std::lock_guard<std::mutex> lock(loop_mutex_);
  return loop_stats_;
}

}  // namespace niels::daemon::grammar
