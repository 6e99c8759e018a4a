#include "daemon/state/kv_spill_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <vector>

#include <fmt/format.h>

namespace niels::daemon::state {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kSuffix = ".kv";
}  // namespace

common::StatusOr<std::unique_ptr<KvSpillStore>> KvSpillStore::Open(const fs::path& dir, uint64_t budget_bytes) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return common::Status::Internal(fmt::format("cannot create the KV spill directory {}: {}", dir.string(),
                                                std::error_code(errno, std::generic_category()).message()));
  }
  std::unique_ptr<KvSpillStore> store(new KvSpillStore(dir, budget_bytes));
  struct Found {
    fs::file_time_type time;
    std::string id;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error)) continue;
    if (name.ends_with(kSuffix) && name.size() > kSuffix.size()) {
      found.push_back({entry.last_write_time(error), name.substr(0, name.size() - kSuffix.size()),
                       static_cast<uint64_t>(entry.file_size(error))});
    } else {
      fs::remove(entry.path(), error);  // "<id>.kv.tmp" of an interrupted write, or a stray file
    }
  }
  if (error) {
    return common::Status::Internal(fmt::format("cannot read the KV spill directory {}: {}", dir.string(), error.message()));
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  for (const Found& file : found) store->Add(file.id, file.bytes);
  // A smaller budget than last time: trim right away.
  while (store->used_bytes_ > store->budget_bytes_ && !store->lru_.empty()) {
    store->RemoveLocked(store->lru_.front());
    ++store->evictions_;
  }
  return store;
}

fs::path KvSpillStore::PathFor(const std::string& id) const { return dir_ / (id + std::string(kSuffix)); }

void KvSpillStore::RemoveLocked(std::string id) {  // by value: callers pass list elements it erases
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    used_bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  std::error_code error;
  fs::remove(PathFor(id), error);
}

bool KvSpillStore::Reserve(const std::string& id, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes > budget_bytes_) return false;
  auto own = entries_.find(id);
  const uint64_t replaced = own == entries_.end() ? 0 : own->second.bytes;
  while (used_bytes_ - replaced + bytes > budget_bytes_) {
    auto victim = std::find_if(lru_.begin(), lru_.end(), [&](const std::string& other) { return other != id; });
    if (victim == lru_.end()) break;
    RemoveLocked(std::string(*victim));
    ++evictions_;
  }
  return true;
}

void KvSpillStore::Add(const std::string& id, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    used_bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  lru_.push_back(id);
  entries_[id] = Entry{bytes, std::prev(lru_.end())};
  used_bytes_ += bytes;
}

std::optional<fs::path> KvSpillStore::Take(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  used_bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  return PathFor(id);
}

void KvSpillStore::Discard(const std::string& id) {
  std::lock_guard lock(mutex_);
  RemoveLocked(id);
}

void KvSpillStore::Retain(const std::function<bool(const std::string& id)>& keep) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> drop;
  for (const auto& [id, entry] : entries_) {
    if (!keep(id)) drop.push_back(id);
  }
  for (const std::string& id : drop) RemoveLocked(id);
}

uint64_t KvSpillStore::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_bytes_;
}

size_t KvSpillStore::file_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

uint64_t KvSpillStore::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace niels::daemon::state
