#pragma once
// KvSpillStore: the directory of KV spill files (kv_spill_file.h), one per session
// ("<session id>.kv"), kept within a byte budget by deleting the least recently used files
// (docs/ARCHITECTURE.md, "Durable sessions").
//
// Open() scans the directory: leftover temporary files are deleted, files of sessions that no longer
// exist can be dropped with Retain(), and the rest become the LRU list (oldest modification time
// first). Make room with Reserve() before writing a file, then Add() it; Take() forgets a file
// before it is read (a file is read back at most once: the cache it restores is in memory again and
// its next eviction writes a fresh file).
//
// Thread-safe (one mutex); the file operations run under it, so keep calls off latency-critical
// paths where a file may be large.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"

namespace niels::daemon::state {

class KvSpillStore {
 public:
  // Creates `dir` (mode 0700) if missing and scans it. INTERNAL when it cannot be created.
  static common::StatusOr<std::unique_ptr<KvSpillStore>> Open(const std::filesystem::path& dir, uint64_t budget_bytes);
  KvSpillStore(const KvSpillStore&) = delete;
  KvSpillStore& operator=(const KvSpillStore&) = delete;

  // Where session `id`'s file lives (whether or not it exists).
  std::filesystem::path PathFor(const std::string& id) const;
  // True when a file of `bytes` can be kept at all (bytes <= budget).
  bool Fits(uint64_t bytes) const { return bytes <= budget_bytes_; }
  // Deletes the least recently used files (never `id`'s own, which is replaced) until a file of
  // `bytes` fits beside the others. False (nothing deleted) when it can never fit.
  bool Reserve(const std::string& id, uint64_t bytes);
  // Records the file just written for `id` as the most recently used.
  void Add(const std::string& id, uint64_t bytes);
  // Forgets `id`'s file and returns its path if there was one; the caller reads and then deletes it
  // (Discard). Reading a file that was never Add()ed is not possible through the store.
  std::optional<std::filesystem::path> Take(const std::string& id);
  // Deletes `id`'s file, if any (the session was deleted, changed its history, or was read back).
  void Discard(const std::string& id);
  // Deletes every file whose session `keep` rejects (e.g. sessions no longer in the database).
  void Retain(const std::function<bool(const std::string& id)>& keep);

  uint64_t used_bytes() const;
  uint64_t budget_bytes() const { return budget_bytes_; }
  size_t file_count() const;
  // Files deleted to stay within the budget so far.
  uint64_t evictions() const;

 private:
  KvSpillStore(std::filesystem::path dir, uint64_t budget_bytes) : dir_(std::move(dir)), budget_bytes_(budget_bytes) {}
  void RemoveLocked(std::string id);

  struct Entry {
    uint64_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  const std::filesystem::path dir_;
  const uint64_t budget_bytes_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // least recently used first
  uint64_t used_bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace niels::daemon::state
