#include "tools/train/chat_corpus.h"

#include <algorithm>
#include <stdexcept>
#include <fstream>

#include <nlohmann/json.hpp>

#include "daemon/text/chat_template.h"

namespace niels::tools::train {
namespace {

namespace text = ::niels::daemon::text;
using common::Status;
using common::StatusOr;
using text::EncodeMessage;
using text::Role;

namespace fs = std::filesystem;

Status ParseLine(const std::string& line, const std::string& where, std::vector<Conversation>& out) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  Conversation c;
  if (j.contains("system")) {
    if (!j["system"].is_string()) return Status::InvalidArgument(where + ": \"system\" must be a string");
    c.system = j["system"].get<std::string>();
  }
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty()) {
    return Status::InvalidArgument(where + ": needs a non-empty \"turns\" array");
  }
  for (const nlohmann::json& t : j["turns"]) {
    if (!t.is_object() || !t.contains("user") || !t.contains("assistant") || !t["user"].is_string() ||
        !t["assistant"].is_string()) {
      return Status::InvalidArgument(where + ": every turn needs string \"user\" and \"assistant\"");
    }
    c.turns.push_back({t["user"].get<std::string>(), t["assistant"].get<std::string>()});
  }
  out.push_back(std::move(c));
  return Status::Ok();
}

Status LoadFile(const fs::path& file, std::vector<Conversation>& out) {
  std::ifstream in(file);
  if (!in) return Status::NotFound(file.string() + ": cannot read");
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (Status s = ParseLine(line, file.string() + ":" + std::to_string(n), out); !s.ok()) return s;
  }
  return Status::Ok();
}

void Append(Example& example, const std::vector<int32_t>& ids, bool trained) {
  example.tokens.insert(example.tokens.end(), ids.begin(), ids.end());
  // The role token opens the message and is given (it is the prompt); the rest is trained if asked.
  example.trained.push_back(0);
  example.trained.insert(example.trained.end(), ids.size() - 1, trained ? 1 : 0);
}

}  // namespace

StatusOr<std::vector<Conversation>> LoadCorpus(const fs::path& path) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      if (e.path().extension() == ".jsonl") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  }
  if (files.empty()) return Status::NotFound(path.string() + ": no .jsonl corpus files");
  std::vector<Conversation> corpus;
  for (const fs::path& f : files) {
    if (Status s = LoadFile(f, corpus); !s.ok()) return s;
  }
  if (corpus.empty()) return Status::NotFound(path.string() + ": the corpus is empty");
  return corpus;
}

std::vector<std::string> CorpusSentences(const std::vector<Conversation>& corpus) {
  std::vector<std::string> out;
  for (const Conversation& c : corpus) {
    if (!c.system.empty()) out.push_back(c.system);
    for (const Turn& t : c.turns) {
      out.push_back(t.user);
      out.push_back(t.assistant);
    }
  }
  return out;
}

Example EncodeConversation(const text::SentencePieceTokenizer& tokenizer, const Conversation& conversation,
                           int64_t max_tokens) {
  // niels_gpt's template; SentencePiece fails only on an internal error, which stops training.
  const auto encode = [&](Role role, const std::string& content) {
    common::StatusOr<std::vector<int32_t>> ids = EncodeMessage(tokenizer, tokenizer.special(), role, content);
    if (!ids.ok()) throw std::runtime_error(ids.status().ToString());
    return std::move(*ids);
  };
  Example example;
  if (!conversation.system.empty()) Append(example, encode(Role::kSystem, conversation.system), false);
  for (const Turn& turn : conversation.turns) {
    std::vector<int32_t> user = encode(Role::kUser, turn.user);
    std::vector<int32_t> reply = encode(Role::kAssistant, turn.assistant);
    if (static_cast<int64_t>(example.tokens.size() + user.size() + reply.size()) > max_tokens) break;
    Append(example, user, false);
    Append(example, reply, true);
  }
  if (std::find(example.trained.begin(), example.trained.end(), 1) == example.trained.end()) return {};
  return example;
}

}  // namespace niels::tools::train
