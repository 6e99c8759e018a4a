#include "daemon/sessions/session_registry.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/log.h"

namespace niels::daemon::sessions {

using common::Status;
using common::StatusOr;

SessionRegistry::SessionRegistry(std::shared_ptr<model::KvPool> pool, SessionLimits limits, KvSpiller& spiller,
                                 state::DurableStore* durable)
    : pool_(std::move(pool)), limits_(limits), spiller_(spiller), durable_(durable) {}

SessionView ViewOf(const Session& session) {
  SessionView view;
  view.id = session.id();
  view.length = session.length();
  view.cached_tokens = session.cached_tokens();
  view.kv_bytes = session.kv_bytes();
  view.kv_own_blocks = session.own_blocks();
  view.kv_shared_blocks = session.shared_blocks();
  view.turns = session.completed_turns();
  view.has_system_prompt = session.has_system_prompt();
  view.system_prompt_text = session.system_prompt_text();
  view.created_unix_s = session.created_unix_s();
  view.last_used_unix_s = session.last_used_unix_s();
  return view;
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

bool SessionRegistry::MayUse(common::OwnerId owner, common::OwnerId caller) const {
  return owner == caller || (caller == 0 && limits_.allow_root);
}

Status SessionRegistry::CheckRoomFor(common::OwnerId owner) const {
  if (sessions_.size() >= limits_.max_sessions) {
    return Status::ResourceExhausted(
        fmt::format("too many sessions ({} of {}): delete one first", sessions_.size(), limits_.max_sessions));
  }
  auto own = sessions_per_uid_.find(owner);
  const uint32_t count = own == sessions_per_uid_.end() ? 0 : own->second;
  if (count >= limits_.max_sessions_per_uid) {
    return Status::ResourceExhausted(fmt::format(
        "{} has {} sessions, the limit per user (--max-sessions-per-uid): delete one first", common::DescribeOwner(owner),
        count));
  }
  return Status::Ok();
}

std::string SessionRegistry::UniqueId() const {
  std::string id = NewSessionId();
  while (sessions_.count(id) != 0) id = NewSessionId();
  return id;
}

Status SessionRegistry::MakeRoomFor(common::OwnerId owner) {
  if (!durable_) return CheckRoomFor(owner);
  while (!CheckRoomFor(owner).ok()) {
    // The owner's own idle sessions first when the owner is at their limit, else anyone's.
    auto own = sessions_per_uid_.find(owner);
    const bool owner_full = own != sessions_per_uid_.end() && own->second >= limits_.max_sessions_per_uid;
    Session* victim = nullptr;
    for (const auto& [id, session] : sessions_) {
      if (session->busy() || (owner_full && session->owner() != owner)) continue;
      if (!victim || session->last_use_tick() < victim->last_use_tick()) victim = session.get();
    }
    if (!victim) return CheckRoomFor(owner);
    Unload(victim);
  }
  return Status::Ok();
}

Session* SessionRegistry::Insert(std::unique_ptr<Session> session) {
  session->Touch(++tick_);
  Session* raw = session.get();
  const std::string id = raw->id();
  sessions_.emplace(id, std::move(session));
  ++sessions_per_uid_[raw->owner()];
  if (durable_) durable_->MarkLoaded(id);
  return raw;
}

void SessionRegistry::Erase(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  const common::OwnerId owner = it->second->owner();
  sessions_.erase(it);
  if (--sessions_per_uid_[owner] == 0) sessions_per_uid_.erase(owner);
  if (durable_) durable_->MarkUnloaded(id);
}

void SessionRegistry::Unload(Session* session) {
  if (session->kv_bytes() > 0) spiller_.SpillAndDropCache(*session);
  TouchStored(*session);
  Erase(std::string(session->id()));
}

namespace {

state::StoredSession ToStored(const Session& session, const state::DurableStore& durable) {
  state::StoredSession stored;
  stored.summary.id = session.id();
  stored.summary.owner = session.owner();
  stored.summary.model_fingerprint = durable.options().model_fingerprint;
  stored.summary.model_name = durable.options().model_name;
  if (session.has_system_prompt()) stored.summary.system_prompt = session.system_prompt_text();
  stored.summary.length = session.length();
  stored.summary.turn_count = session.completed_turns();
  stored.summary.created_unix_s = session.created_unix_s();
  stored.summary.last_used_unix_s = session.last_used_unix_s();
  stored.history = session.History();
  return stored;
}

// Session ids are 32 hex digits; anything else names no session (and is never looked up).
bool LooksLikeSessionId(const std::string& id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

StatusOr<Session*> SessionRegistry::Create(common::OwnerId owner, const std::optional<std::string>& system_text,
                                        std::vector<int32_t> system_ids) {
  NIELS_RETURN_IF_ERROR(MakeRoomFor(owner));
  std::string id = UniqueId();
  auto session = std::make_unique<Session>(id, owner, pool_);
  if (system_text) session->SetSystemPrompt(std::move(system_ids), *system_text);
  if (durable_) {
    std::vector<std::string> evicted;
    NIELS_RETURN_IF_ERROR(durable_->Create(ToStored(*session, *durable_), &evicted));
    session->set_stored_last_used_unix_s(session->last_used_unix_s());
  }
  return Insert(std::move(session));
}

bool SessionRegistry::TouchStored(Session& session) {
  if (!durable_) return true;
  const double now = UnixNow();
  if (now - session.stored_last_used_unix_s() < durable_->touch_slack_s()) return true;
  const Status touched = durable_->Touch(session.id(), session.last_used_unix_s());
  if (touched.code() == common::StatusCode::kNotFound) return false;
  if (touched.ok()) session.set_stored_last_used_unix_s(session.last_used_unix_s());
  return true;  // a failed touch (disk full) only delays it
}

StatusOr<Session*> SessionRegistry::Load(const std::string& id, common::OwnerId caller) {
  auto stored = durable_->Load(id);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) return Status::NotFound(fmt::format("unknown session '{}'", id));
  const state::SessionSummary& summary = (*stored)->summary;
  if (!MayUse(summary.owner, caller)) {
    return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", id));
  }
  if (!durable_->IsThisModel(summary)) {
    return Status::InvalidArgument(fmt::format(
        "session '{}' belongs to another model ('{}'), not the '{}' nielsd serves now; it is kept for that "
        "model (run nielsd with it to continue the session, or delete the session)",
        id, summary.model_name, durable_->options().model_name));
  }
  NIELS_RETURN_IF_ERROR(MakeRoomFor(summary.owner));
  // The use is recorded before the session is handed out: a session the background expiry deletes
  // at this very moment is either deleted (NOT_FOUND here) or touched, never both.
  const double now = UnixNow();
  if (Status touched = durable_->Touch(id, now); !touched.ok()) {
    if (touched.code() == common::StatusCode::kNotFound) return Status::NotFound(fmt::format("unknown session '{}'", id));
    return touched;
  }
  std::unique_ptr<Session> session = Session::FromStored(**stored, pool_);
  session->set_stored_last_used_unix_s(now);
  return Insert(std::move(session));
}

StatusOr<Session*> SessionRegistry::Find(const std::string& id, common::OwnerId caller) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    if (durable_ && LooksLikeSessionId(id)) return Load(id, caller);
    return Status::NotFound(fmt::format("unknown session '{}'", DisplayId(id)));
  }
  if (!MayUse(it->second->owner(), caller)) {
    return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", DisplayId(id)));
  }
  Session& session = *it->second;
  session.Touch(++tick_);
  if (!TouchStored(session) && !session.busy()) {  // expired in the database meanwhile
    Erase(id);
    return Status::NotFound(fmt::format("unknown session '{}'", DisplayId(id)));
  }
  return &session;
}

StatusOr<Session*> SessionRegistry::Fork(const std::string& id, common::OwnerId caller) {
  StatusOr<Session*> source = Find(id, caller);
  if (!source.ok()) return source.status();
  // MakeRoomFor must not unload the source (a fork waits behind any turn on it: it is idle here).
  (*source)->MarkBusy(0);
  const Status room = MakeRoomFor(caller);
  (*source)->ClearBusy();
  NIELS_RETURN_IF_ERROR(room);
  std::string new_id = UniqueId();
  // The fork shares the source's blocks (no KV copy): it costs no KV memory until it writes.
  std::unique_ptr<Session> fork = (*source)->Fork(new_id, caller, /*with_cache=*/true);
  if (durable_) {
    std::vector<std::string> evicted;
    NIELS_RETURN_IF_ERROR(durable_->Create(ToStored(*fork, *durable_), &evicted));
    fork->set_stored_last_used_unix_s(fork->last_used_unix_s());
  }
  return Insert(std::move(fork));
}

Status SessionRegistry::Delete(const std::string& id, common::OwnerId caller) {
  if (durable_ && sessions_.count(id) == 0 && LooksLikeSessionId(id)) {
    // Not loaded: check the owner from the database (a session of another model may be deleted).
    auto summary = durable_->Summary(id);
    if (!summary.ok()) return summary.status();
    if (!summary->has_value()) return Status::NotFound(fmt::format("unknown session '{}'", id));
    if (!MayUse((*summary)->owner, caller)) {
      return Status::PermissionDenied(fmt::format("session '{}' belongs to another user", id));
    }
    return durable_->Delete(id);
  }
  StatusOr<Session*> session = Find(id, caller);
  if (!session.ok()) return session.status();
  if (durable_) NIELS_RETURN_IF_ERROR(durable_->Delete(id));
  Erase(id);
  return Status::Ok();
}

Status SessionRegistry::Commit(Session& session) {
  if (!durable_) return Status::Ok();
  const double now = UnixNow();
  NIELS_RETURN_IF_ERROR(durable_->Commit(session.id(), session.History(), now));
  session.set_stored_last_used_unix_s(now);
  // A spill file of the old history would no longer match; the next eviction writes a new one.
  spiller_.Discard(session);
  return Status::Ok();
}

Status SessionRegistry::Reset(Session& session) {
  Session::Snapshot snapshot = session.TakeSnapshot();
  session.Reset();
  Status committed = Commit(session);
  if (!committed.ok()) session.Restore(std::move(snapshot));
  return committed;
}

Status SessionRegistry::Rewind(Session& session, size_t keep, int64_t length) {
  Session::Snapshot snapshot = session.TakeSnapshot();
  session.Rewind(keep, length);
  Status committed = Commit(session);
  if (!committed.ok()) session.Restore(std::move(snapshot));
  return committed;
}

size_t SessionRegistry::ExpireIdle(std::chrono::steady_clock::time_point cutoff) {
  std::vector<Session*> idle;
  for (const auto& [id, session] : sessions_) {
    if (!session->busy() && session->last_used() < cutoff) idle.push_back(session.get());
  }
  for (Session* session : idle) {
    if (durable_) {
      Unload(session);
    } else {
      Erase(std::string(session->id()));
    }
  }
  return idle.size();
}

size_t SessionRegistry::ExpireStored(double cutoff_unix_s) {
  if (!durable_) return 0;
  for (const std::string& id : durable_->TakeExpired()) {
    auto it = sessions_.find(id);
    if (it != sessions_.end() && !it->second->busy()) Erase(id);
  }
  std::vector<std::string> expired;
  for (const auto& [id, session] : sessions_) {
    if (!session->busy() && session->last_used_unix_s() < cutoff_unix_s) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    if (durable_->Delete(id).ok()) Erase(id);
  }
  return expired.size();
}

StatusOr<std::vector<SessionView>> SessionRegistry::List(common::OwnerId caller) const {
  std::vector<SessionView> own;
  for (const auto& [id, session] : sessions_) {
    if (session->owner() == caller) own.push_back(ViewOf(*session));
  }
  if (durable_) {
    auto stored = durable_->List(caller);
    if (!stored.ok()) return stored.status();
    for (const state::SessionSummary& summary : *stored) {
      if (sessions_.count(summary.id) != 0) continue;  // loaded: its in-memory view is current
      SessionView view;
      view.id = summary.id;
      view.length = summary.length;
      view.turns = static_cast<int32_t>(summary.turn_count);
      view.has_system_prompt = summary.system_prompt.has_value();
      view.system_prompt_text = summary.system_prompt.value_or("");
      view.created_unix_s = summary.created_unix_s;
      view.last_used_unix_s = summary.last_used_unix_s;
      view.other_model = !durable_->IsThisModel(summary);
      if (view.other_model) view.model_name = summary.model_name;
      own.push_back(std::move(view));
    }
  }
  std::sort(own.begin(), own.end(), [](const SessionView& a, const SessionView& b) {
    return a.created_unix_s < b.created_unix_s;
  });
  return own;
}

}  // namespace niels::daemon::sessions
