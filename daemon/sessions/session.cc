#include "daemon/sessions/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <utility>

namespace niels::daemon::sessions {

std::string NewSessionId() {
  std::random_device device;
  std::string id;
  id.reserve(32);
  for (int word = 0; word < 4; ++word) {  // 4 x 32 bits = 128 bits
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(device()));
    id += hex;
  }
  return id;
}

double UnixNow() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

Session::Session(std::string id, common::OwnerId owner, std::shared_ptr<model::KvPool> pool)
    : id_(std::move(id)), owner_(owner), pool_(pool), sequence_(std::move(pool), model::KvPool::ScopeRoot(owner)) {
  created_unix_s_ = UnixNow();
  last_used_unix_s_ = created_unix_s_;
}

void Session::SetSystemPrompt(std::vector<int32_t> ids, std::string text) {
  sequence_.tokens = std::move(ids);
  system_prompt_text_ = std::move(text);
  sequence_.cache.Clear();
  has_system_prompt_ = true;
  system_end_ = length();
  turns_.clear();
  sampled_replies_.clear();
}

void Session::AddTurn(TokenSpan span) { turns_.push_back(span); }

void Session::AppendToLastTurn(int32_t id) {
  sequence_.tokens.push_back(id);
  turns_.back().end = length();
}

int64_t Session::LengthWithoutOldestTurns(size_t count) const {
  if (count == 0) return length();
  return length() - (turns_[count - 1].end - system_end_);
}

void Session::DropOldestTurns(size_t count, Snapshot& snapshot) {
  if (count == 0) return;
  const int64_t cut = turns_[count - 1].end;
  const int64_t removed = cut - system_end_;
  auto& tokens = sequence_.tokens;
  tokens.erase(tokens.begin() + system_end_, tokens.begin() + cut);
  turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(count));
  sampled_replies_.clear();
  for (TokenSpan& turn : turns_) {
    turn.begin -= removed;
    turn.end -= removed;
  }
  // Positions after the system prompt moved: only the system prompt's keys/values stay valid. The
  // old ones are given up, not kept for Restore(): the turn is about to prefill the kept history
  // into new blocks, and holding both would make it need up to twice the memory. A restored
  // session keeps the system prompt cached and prefills the rest of its history on its next
  // request (whose own truncation would drop those positions again anyway).
  snapshot.cache_length = std::min(snapshot.cache_length, system_end_);
  sequence_.cache.Truncate(std::min(sequence_.cache.length(), system_end_));
}

void Session::AddExchange(text::ChatMessage user, text::ChatMessage assistant) {
  messages_.push_back(std::move(user));
  messages_.push_back(std::move(assistant));
}

void Session::SetMessages(std::vector<text::ChatMessage> messages) {
  messages_ = std::move(messages);
  sampled_replies_.clear();
}

int32_t Session::completed_turns() const {
  const auto replies = std::count_if(messages_.begin(), messages_.end(),
                                     [](const text::ChatMessage& m) { return m.role == text::Role::kAssistant; });
  return static_cast<int32_t>(turns_.size()) + static_cast<int32_t>(replies);
}

void Session::SetTools(std::shared_ptr<const std::vector<text::ToolDefinition>> tools) {
  if (tools != nullptr && tools->empty()) tools = nullptr;
  tools_ = std::move(tools);
}

void Session::TruncateHistory(int64_t length, Snapshot& snapshot) {
  sequence_.tokens.resize(static_cast<size_t>(length));
  sequence_.cache.Truncate(std::min(sequence_.cache.length(), length));
  snapshot.cache_length = std::min(snapshot.cache_length, length);
  system_end_ = std::min(system_end_, length);
  std::erase_if(sampled_replies_, [length](const SampledReply& reply) { return reply.end > length; });
}

void Session::Reset() {
  sequence_.tokens.resize(static_cast<size_t>(system_end_));
  sequence_.cache.Truncate(std::min(sequence_.cache.length(), system_end_));
  turns_.clear();
  messages_.clear();
  sampled_replies_.clear();
}

void Session::Rewind(size_t keep, int64_t length) {
  if (keep < turns_.size()) turns_.resize(keep);
  if (turns_.empty() && keep < messages_.size()) messages_.resize(keep);
  std::erase_if(sampled_replies_, [this, length](const SampledReply& reply) {
    return reply.message >= messages_.size() || reply.end > length;
  });
  sequence_.tokens.resize(static_cast<size_t>(length));
  sequence_.cache.Truncate(std::min(sequence_.cache.length(), length));
}

void Session::DropCache() { sequence_.cache.Clear(); }

Session::Snapshot Session::TakeSnapshot() const {
  Snapshot snapshot;
  snapshot.tokens = sequence_.tokens;
  snapshot.turns = turns_;
  snapshot.messages = messages_;
  snapshot.tools = tools_;
  snapshot.sampled_replies = sampled_replies_;
  snapshot.system_end = system_end_;
  snapshot.cache_length = sequence_.cache.length();
  return snapshot;
}

void Session::StashCache(Snapshot& snapshot) {
  if (snapshot.stashed_cache) {
    sequence_.cache = EmptyCache();
    return;
  }
  snapshot.stashed_cache.emplace(std::move(sequence_.cache));
  sequence_.cache = EmptyCache();
}

void Session::StashCacheCopy(Snapshot& snapshot) {
  if (!snapshot.stashed_cache) snapshot.stashed_cache.emplace(sequence_.cache.Share());
}

void Session::Restore(Snapshot snapshot) {
  sequence_.tokens = std::move(snapshot.tokens);
  turns_ = std::move(snapshot.turns);
  messages_ = std::move(snapshot.messages);
  tools_ = std::move(snapshot.tools);
  sampled_replies_ = std::move(snapshot.sampled_replies);
  system_end_ = snapshot.system_end;
  if (snapshot.stashed_cache) sequence_.cache = std::move(*snapshot.stashed_cache);
  // The history only grew since the snapshot (or the stashed cache is back): truncating suffices
  // (and gives back any block a failed step had taken beyond the cached positions).
  sequence_.cache.Truncate(std::min(sequence_.cache.length(), snapshot.cache_length));
}

std::unique_ptr<Session> Session::Fork(std::string new_id, common::OwnerId owner, bool with_cache) const {
  auto fork = std::make_unique<Session>(std::move(new_id), owner, pool_);
  fork->sequence_.tokens = sequence_.tokens;
  if (with_cache) fork->sequence_.cache = sequence_.cache.Share();
  fork->has_system_prompt_ = has_system_prompt_;
  fork->system_prompt_text_ = system_prompt_text_;
  fork->system_end_ = system_end_;
  fork->turns_ = turns_;
  fork->messages_ = messages_;
  fork->sampled_replies_ = sampled_replies_;
  fork->tools_ = tools_;
  return fork;
}

state::StoredHistory Session::History() const {
  state::StoredHistory history;
  history.system_end = system_end_;
  history.tokens = sequence_.tokens;
  history.turns.reserve(turns_.size());
  for (const TokenSpan& turn : turns_) history.turns.push_back({turn.begin, turn.end});
  history.messages.reserve(messages_.size());
  for (const text::ChatMessage& message : messages_) {
    state::StoredMessage stored{std::string(text::RoleName(message.role)), message.content, message.reasoning};
    for (const text::ToolCall& call : message.tool_calls) stored.tool_calls.push_back({call.id, call.name, call.arguments});
    stored.tool_call_id = message.tool_call_id;
    stored.name = message.name;
    history.messages.push_back(std::move(stored));
  }
  if (tools_ != nullptr) {
    for (const text::ToolDefinition& tool : *tools_) history.tools.push_back({tool.name, tool.description, tool.parameters});
  }
  return history;
}

std::unique_ptr<Session> Session::FromStored(const state::StoredSession& stored, std::shared_ptr<model::KvPool> pool) {
  auto session = std::make_unique<Session>(stored.summary.id, stored.summary.owner, std::move(pool));
  session->sequence_.tokens = stored.history.tokens;
  session->has_system_prompt_ = stored.summary.system_prompt.has_value();
  session->system_prompt_text_ = stored.summary.system_prompt.value_or("");
  session->system_end_ = stored.history.system_end;
  for (const state::TurnRange& turn : stored.history.turns) session->turns_.push_back({turn.begin, turn.end});
  for (const state::StoredMessage& message : stored.history.messages) {  // roles checked by HistoryProblem
    const text::Role role = message.role == "assistant" ? text::Role::kAssistant
                            : message.role == "tool"    ? text::Role::kTool
                                                        : text::Role::kUser;
    text::ChatMessage restored{role, message.content, message.reasoning};
    for (const state::StoredToolCall& call : message.tool_calls) restored.tool_calls.push_back({call.id, call.name, call.arguments});
    restored.tool_call_id = message.tool_call_id;
    restored.name = message.name;
    session->messages_.push_back(std::move(restored));
  }
  if (!stored.history.tools.empty()) {
    auto tools = std::make_shared<std::vector<text::ToolDefinition>>();
    for (const state::StoredTool& tool : stored.history.tools) tools->push_back({tool.name, tool.description, tool.parameters});
    session->tools_ = std::move(tools);
  }
  session->created_unix_s_ = stored.summary.created_unix_s;
  session->last_used_unix_s_ = stored.summary.last_used_unix_s;
  session->stored_last_used_unix_s_ = stored.summary.last_used_unix_s;
  return session;
}

void Session::Touch(uint64_t tick) {
  last_use_tick_ = tick;
  last_used_unix_s_ = UnixNow();
  last_used_ = std::chrono::steady_clock::now();
}

}  // namespace niels::daemon::sessions
