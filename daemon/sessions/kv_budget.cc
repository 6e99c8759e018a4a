#include "daemon/sessions/kv_budget.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace niels::daemon::sessions {

using common::Status;

KvBudget::KvBudget(SessionRegistry& registry, KvSpiller& spiller) : registry_(registry), spiller_(spiller) {
  registry_.pool().SetReclaimer([this] { return DropOneIdleCache(); });
}

KvBudget::~KvBudget() { registry_.pool().SetReclaimer({}); }

int64_t KvBudget::BlocksForTokens(int64_t tokens) {
  return (std::max<int64_t>(tokens, 0) + model::KvPool::kBlockTokens - 1) / model::KvPool::kBlockTokens;
}

uint64_t KvBudget::used_bytes() const { return static_cast<uint64_t>(pool().used()) * pool().block_bytes(); }

Session* KvBudget::PickVictim() const {
  const SessionRegistry::Loaded& sessions = registry_.loaded();
  // Blocks held per owner (a block shared by several sessions counted in each).
  std::map<common::OwnerId, int64_t> held;
  for (const auto& [id, session] : sessions) {
    if (session->sequence().cache.blocks() > 0) held[session->owner()] += session->sequence().cache.blocks();
  }
  const model::KvPool& blocks = pool();
  const int64_t fair_share = held.empty() ? blocks.capacity() : blocks.capacity() / static_cast<int64_t>(held.size());
  Session* victim = nullptr;
  bool victim_over_share = false;
  for (const auto& [id, session] : sessions) {
    if (session->busy() || session->sequence().cache.blocks() == 0) continue;
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

bool KvBudget::DropOneIdleCache() {
  Session* victim = PickVictim();
  if (victim == nullptr) return false;
  spiller_.SpillAndDropCache(*victim);
  ++evictions_;
  return true;
}

Status KvBudget::Admit(Session& session, int64_t final_length, bool* must_wait) {
  *must_wait = false;
  const model::KvPool& blocks = pool();
  // The blocks of the whole history, plus one for a shared last block it may have to copy.
  const int64_t needed = BlocksForTokens(std::min(final_length, blocks.context())) + 1;
  if (needed > blocks.capacity()) {
    return Status::ResourceExhausted(fmt::format(
        "this request needs about {} bytes of KV cache, more than the budget of {} bytes (--kv-budget-mb)",
        static_cast<uint64_t>(needed) * blocks.block_bytes(), budget_bytes()));
  }
  int64_t reserved = 0;  // what the running turns hold or may grow to
  for (const auto& [id, other] : registry_.loaded()) {
    if (other->busy() && other.get() != &session) {
      reserved += std::max(other->reserved_blocks(), other->sequence().cache.blocks());
    }
  }
  if (reserved + needed > blocks.capacity()) {
    *must_wait = true;
    return Status::Ok();
  }
  session.MarkBusy(needed);
  return Status::Ok();
}

}  // namespace niels::daemon::sessions
