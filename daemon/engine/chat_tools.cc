#include "daemon/engine/chat_tools.h"

#include <random>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

Status ToolGrammarCache::Remember(const Tools& tools, std::shared_ptr<const tool_grammar::ToolChoiceGrammars> grammars,
                                  Status status, common::OwnerId owner) {
  if (tools == nullptr) return Status();
  std::erase_if(entries_, [](const auto& entry) { return entry.second.tools.expired(); });
  if (Find(tools) != nullptr) return Status();  // kept already (the set of a session sent again)
  const uint64_t bytes = grammars != nullptr ? grammars->memory_bytes() : 0;
  const uint64_t all = this->bytes(), own = bytes_of(owner);
  constexpr double kMiB = 1024.0 * 1024.0;
  if (own + bytes > max_bytes_per_uid_) {
    return Status::ResourceExhausted(fmt::format(
        "tools: the tool-call grammars of this user's tool sets would hold {:.1f} MiB with these ({:.1f} MiB), past "
        "the limit of {:.1f} MiB per user; delete sessions with tools, or send fewer or smaller tool sets",
        (own + bytes) / kMiB, bytes / kMiB, max_bytes_per_uid_ / kMiB));
  }
  if (all + bytes > max_bytes_) {
    return Status::ResourceExhausted(fmt::format(
        "tools: the tool-call grammars of all users' tool sets would hold {:.1f} MiB with these ({:.1f} MiB), past "
        "the daemon's limit of {:.1f} MiB; try again later",
        (all + bytes) / kMiB, bytes / kMiB, max_bytes_ / kMiB));
  }
  entries_[tools.get()] = Entry{tools, std::move(grammars), std::move(status), owner, bytes};
  return Status();
}

uint64_t ToolGrammarCache::bytes() const {
  uint64_t sum = 0;
  for (const auto& [key, entry] : entries_) sum += entry.tools.expired() ? 0 : entry.bytes;
  return sum;
}

uint64_t ToolGrammarCache::bytes_of(common::OwnerId owner) const {
  uint64_t sum = 0;
  for (const auto& [key, entry] : entries_) sum += entry.owner == owner && !entry.tools.expired() ? entry.bytes : 0;
  return sum;
}

const ToolGrammarCache::Entry* ToolGrammarCache::Find(const Tools& tools) const {
  if (tools == nullptr) return nullptr;
  const auto found = entries_.find(tools.get());
  if (found == entries_.end() || found->second.tools.lock() != tools) return nullptr;
  return &found->second;
}

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> ToolChoiceConstraint(const ToolGrammarCache& cache,
                                                                               const ToolGrammarCache::Tools& tools,
                                                                               const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::kNone) return std::shared_ptr<const grammar::CompiledGrammar>();
  if (choice.mode == ToolChoice::Mode::kAuto) {
    // Free when there is nothing to constrain with: no tools, a set restored from disk and not
    // sent again, or one the tool grammar does not take; the calls are then parsed from free text.
    const ToolGrammarCache::Entry* entry = tools == nullptr || tools->empty() ? nullptr : cache.Find(tools);
    if (entry == nullptr || entry->grammars == nullptr) return std::shared_ptr<const grammar::CompiledGrammar>();
    return entry->grammars->automatic;
  }
  if (tools == nullptr || tools->empty()) {
    return Status::InvalidArgument("tool_choice: a forced tool choice needs tools (the session has none)");
  }
  if (choice.mode == ToolChoice::Mode::kNamed) {
    bool known = false;
    for (const text::ToolDefinition& tool : *tools) known = known || tool.name == choice.name;
    if (!known) return Status::InvalidArgument(fmt::format("tool_choice.name: no tool is named \"{}\"", choice.name));
  }
  const ToolGrammarCache::Entry* entry = cache.Find(tools);
  if (entry == nullptr) {
    return Status::InvalidArgument(
        "tool_choice: the session's tools were restored from disk and are not compiled; send them again "
        "(ChatRequest.tools) to force a call");
  }
  if (entry->grammars == nullptr) {
    return Status::InvalidArgument("tool_choice: these tools cannot be forced: " + entry->status.message());
  }
  if (choice.mode == ToolChoice::Mode::kRequired) return entry->grammars->required;
  const auto named = entry->grammars->named.find(choice.name);
  if (named == entry->grammars->named.end()) {
    return Status::InvalidArgument(fmt::format("tool_choice.name: no tool is named \"{}\"", choice.name));
  }
  return named->second;
}

ToolCallIds::ToolCallIds(std::span<const text::ChatMessage> conversation) {
  for (const text::ChatMessage& message : conversation) {
    for (const text::ToolCall& call : message.tool_calls) taken_.insert(call.id);
  }
}

const std::string& ToolCallIds::Id(size_t index) {
  while (ids_.size() <= index) {
    std::random_device device;
    std::string id;
    do {
      id = fmt::format("call_{:08x}{:08x}{:08x}", device(), device(), device());
    } while (taken_.contains(id));
    taken_.insert(id);
    ids_.push_back(std::move(id));
  }
  return ids_[index];
}

namespace {

std::vector<std::string> ToolNames(const std::vector<text::ToolDefinition>& tools) {
  std::vector<std::string> names;
  names.reserve(tools.size());
  for (const text::ToolDefinition& tool : tools) names.push_back(tool.name);
  return names;
}

}  // namespace

ReplyToolCalls::ReplyToolCalls(tool_calls::ToolCallFamily family, const std::vector<text::ToolDefinition>& tools,
                               bool calls_allowed, std::shared_ptr<ToolCallIds> ids)
    : ids_(std::move(ids)) {
  tool_calls::ToolCallParserOptions options;
  options.tool_names = ToolNames(tools);
  options.calls_allowed = calls_allowed;
  parser_ = tool_calls::MakeToolCallParser(family, std::move(options));
}

void ReplyToolCalls::Add(tool_calls::Delta delta, Piece& out) {
  out.content += delta.content;
  for (tool_calls::ToolCallDelta& call : delta.calls) {
    ToolCallPiece piece;
    piece.index = call.index;
    if (!call.name.empty()) {
      piece.id = ids_->Id(call.index);
      piece.name = std::move(call.name);
      ++calls_;
    }
    piece.arguments = std::move(call.arguments);
    out.calls.push_back(std::move(piece));
  }
}

ReplyToolCalls::Piece ReplyToolCalls::Feed(std::string_view text) {
  Piece out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (capped_) {
      out.content.append(text.substr(i));
      break;
    }
    Add(parser_->Feed(text.substr(i, 1)), out);
    if (calls_ >= kMaxToolCallsPerReply) {
      Add(parser_->Finish().last, out);
      capped_ = true;
    }
  }
  return out;
}

ReplyToolCalls::Piece ReplyToolCalls::Finish() {
  Piece out;
  if (!capped_) {
    Add(parser_->Finish().last, out);
    capped_ = true;
  }
  return out;
}

std::pair<std::string, std::vector<text::ToolCall>> ReplyToolCalls::Parse(
    tool_calls::ToolCallFamily family, const std::vector<text::ToolDefinition>& tools, bool calls_allowed,
    std::shared_ptr<ToolCallIds> ids, std::string_view answer) {
  ReplyToolCalls parser(family, tools, calls_allowed, std::move(ids));
  Piece fed = parser.Feed(answer);
  Piece rest = parser.Finish();
  std::string content = std::move(fed.content) + rest.content;
  std::vector<text::ToolCall> calls;
  for (std::vector<ToolCallPiece>* pieces : {&fed.calls, &rest.calls}) {
    for (ToolCallPiece& piece : *pieces) {
      if (piece.index >= calls.size()) calls.resize(piece.index + 1);
      text::ToolCall& call = calls[piece.index];
      if (!piece.name.empty()) {
        call.id = piece.id;
        call.name = piece.name;
      }
      call.arguments += piece.arguments;
    }
  }
  return {std::move(content), std::move(calls)};
}

}  // namespace niels::daemon::engine
