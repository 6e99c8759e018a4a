#include "daemon/engine/session_store.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

SessionStore::SessionStore(const model::ModelConfig& config, SessionStoreOptions options)
    : config_(config), options_(options), pool_(std::make_shared<model::KvPool>(config, options.kv_budget_bytes)) {
  pool_->SetReclaimer([this] { return DropOneIdleCache(); });
}

namespace {

// A session id as error messages show it: a client-supplied id can be megabytes long, so only its
// start is echoed.
std::string DisplayId(const std::string& id) {
  constexpr size_t kShown = 40;
  if (id.size() <= kShown) return id;
  return fmt::format("{}... ({} bytes)", id.substr(0, kShown), id.size());
}

}  // namespace

bool SessionStore::MayUse(const Session& session, uint32_t caller) const {
  return session.owner() == caller || (caller == 0 && options_.allow_root);
}

Status SessionStore::CheckRoomFor(uint32_t owner) const {
  if (sessions_.size() >= options_.max_sessions) {
    return Status::ResourceExhausted(
        fmt::format("too many sessions ({} of {}): delete one first", sessions_.size(), options_.max_sessions));
  }
  auto own = sessions_per_uid_.find(owner);
  const uint32_t count = own == sessions_per_uid_.end() ? 0 : own->second;
  if (count >= options_.max_sessions_per_uid) {
    return Status::ResourceExhausted(fmt::format(
        "uid {} has {} sessions, the limit per user (--max-sessions-per-uid): delete one first", owner,
        count));
  }
  return Status::Ok();
}

std::string SessionStore::UniqueId() const {
  std::string id = NewSessionId();
  while (sessions_.count(id) != 0) id = NewSessionId();
  return id;
}

StatusOr<Session*> SessionStore::Create(uint32_t owner) {
  NIELS_RETURN_IF_ERROR(CheckRoomFor(owner));
  std::string id = UniqueId();
  auto session = std::make_unique<Session>(id, owner, pool_);
  session->Touch(++tick_);
  Session* raw = session.get();
  sessions_.emplace(std::move(id), std::move(session));
  ++sessions_per_uid_[owner];
  return raw;
}

StatusOr<Session*> SessionStore::Find(const std::string& id, uint32_t caller) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return Status::NotFound(fmt::format("unknown session '{}'", DisplayId(id)));
  if (!MayUse(*it->second, caller)) {
    return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", DisplayId(id)));
  }
  it->second->Touch(++tick_);
  return it->second.get();
}

StatusOr<Session*> SessionStore::Fork(const std::string& id, uint32_t caller) {
  StatusOr<Session*> source = Find(id, caller);
  if (!source.ok()) return source.status();
  NIELS_RETURN_IF_ERROR(CheckRoomFor(caller));
  std::string new_id = UniqueId();
  std::unique_ptr<Session> fork = (*source)->Fork(new_id, caller, /*with_cache=*/true);
  fork->Touch(++tick_);
  Session* raw = fork.get();
  sessions_.emplace(std::move(new_id), std::move(fork));
  ++sessions_per_uid_[caller];
  return raw;
}

Status SessionStore::Delete(const std::string& id, uint32_t caller) {
  StatusOr<Session*> session = Find(id, caller);
  if (!session.ok()) return session.status();
  const uint32_t owner = (*session)->owner();
  sessions_.erase(id);
  if (--sessions_per_uid_[owner] == 0) sessions_per_uid_.erase(owner);
  return Status::Ok();
}

size_t SessionStore::ExpireIdle(std::chrono::steady_clock::time_point cutoff) {
  size_t expired = 0;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const Session& session = *it->second;
    if (IsBusy(&session) || session.last_used() >= cutoff) {
      ++it;
      continue;
    }
    const uint32_t owner = session.owner();
    it = sessions_.erase(it);
    if (--sessions_per_uid_[owner] == 0) sessions_per_uid_.erase(owner);
    ++expired;
  }
  return expired;
}

std::vector<const Session*> SessionStore::List(uint32_t caller) const {
  std::vector<const Session*> own;
  for (const auto& [id, session] : sessions_) {
    if (session->owner() == caller) own.push_back(session.get());
  }
  std::sort(own.begin(), own.end(), [](const Session* a, const Session* b) {
    return a->created_unix_s() < b->created_unix_s();
  });
  return own;
}

int64_t SessionStore::BlocksForTokens(int64_t tokens) const {
  return (std::max<int64_t>(tokens, 0) + model::KvPool::kBlockTokens - 1) / model::KvPool::kBlockTokens;
}

uint64_t SessionStore::kv_bytes() const { return static_cast<uint64_t>(pool_->used()) * pool_->block_bytes(); }

Session* SessionStore::PickVictim() const {
  // Blocks held per owner (a block shared by several sessions counted in each).
  std::map<uint32_t, int64_t> held;
  for (const auto& [id, session] : sessions_) {
    if (session->sequence().cache.blocks() > 0) held[session->owner()] += session->sequence().cache.blocks();
  }
  const int64_t fair_share = held.empty() ? pool_->capacity() : pool_->capacity() / static_cast<int64_t>(held.size());
  Session* victim = nullptr;
  bool victim_over_share = false;
  for (const auto& [id, session] : sessions_) {
    if (IsBusy(session.get()) || session->sequence().cache.blocks() == 0) continue;
    const bool over_share = held[session->owner()] > fair_share;
    const bool better = !victim || (over_share && !victim_over_share) ||
                        (over_share == victim_over_share && session->last_use_tick() < victim->last_use_tick());
    if (better) {
      victim = session.get();
      victim_over_share = over_share;
    }
  }
  return victim;
}

bool SessionStore::DropOneIdleCache() {
  Session* victim = PickVictim();
  if (victim == nullptr) return false;
  victim->DropCache();
  ++evictions_;
  return true;
}

Status SessionStore::Admit(const Session* session, int64_t final_length, bool* must_wait) {
  *must_wait = false;
  // The blocks of the whole history, plus one for a shared last block it may have to copy.
  const int64_t needed = BlocksForTokens(std::min(final_length, config_.context)) + 1;
  if (needed > pool_->capacity()) {
    return Status::ResourceExhausted(fmt::format(
        "this request needs about {} bytes of KV cache, more than the budget of {} bytes (--kv-budget-mb)",
        static_cast<uint64_t>(needed) * pool_->block_bytes(), options_.kv_budget_bytes));
  }
  int64_t reserved = 0;  // what the running turns hold or may grow to
  for (const auto& [busy, blocks] : busy_) {
    if (busy != session) reserved += std::max(blocks, busy->sequence().cache.blocks());
  }
  if (reserved + needed > pool_->capacity()) {
    *must_wait = true;
    return Status::Ok();
  }
  MarkBusy(session, needed);
  return Status::Ok();
}

}  // namespace niels::daemon::engine
