// The shipped demo model (models/niels-demo, trained by tools/train on data/corpus) served by a real
// nielsd started WITHOUT --model, driven by niels-chat and the client library:
// - paraphrased corpus questions (checked to be absent from the corpus) get replies with the key
//   phrase of the corpus answer; questions outside the corpus get "i don't know";
// - a 6-turn greedy chat gives the same replies with and without --no-kv-cache, and every reply
//   ends on the eot token (stop reason EOT, not the token limit).
// The expected key phrases are copied from the hand-written answers in tools/train/corpus_tables.py.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/daemon_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/test_model.h"

namespace niels::integration {
namespace {

const std::string kDefaultSystem =
    "you are a tiny chatbot on niels\u2019 website. answer in third person about niels. do not invent personal "
    "facts; if you don\u2019t know, say you don\u2019t know.";
const std::string kCorpusFile = std::string(NIELS_SOURCE_DIR) + "/data/corpus/niels_corpus.jsonl";
const std::string kIdk = "i don't know";

struct Probe {
  std::string question;  // phrased differently from every user turn of the corpus
  std::string key;       // a phrase of the corpus answer the reply must contain
};

const std::vector<Probe> kCorpusProbes = {
    {"what exactly is nielsd?", "inference daemon"},
    {"how would i start nielsd?", "run nielsd"},
    {"how can i stop the nielsd daemon?", "sigterm"},
    {"what is the point of the kv cache?", "keys and values"},
    {"what path does the nielsd socket use?", "nielsd.sock"},
    {"what does the --greedy flag do?", "temperature 0"},
    {"what's the default for --max-new-tokens?", "256"},
    {"how can i quit niels-chat?", "/exit"},
};

const std::vector<std::string> kOutOfCorpus = {
    "what is the capital of portugal?",
    "how old is niels' brother?",
};

// The six lines of the multi-turn chat (short answers, so the chat fits the context).
const std::vector<std::string> kSixTurns = {
    "hello", "what is niels-chat?", "what does --stream do?", "how old is niels?", "what is a session?", "thanks",
};

std::string Normalize(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  while (!s.empty() && (s.back() == '?' || s.back() == ' ')) s.pop_back();
  return s;
}

// Every user turn of the training corpus, normalized.
std::set<std::string> CorpusQuestions() {
  std::set<std::string> out;
  std::ifstream in(kCorpusFile);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const nlohmann::json& turn : j["turns"]) out.insert(Normalize(turn["user"].get<std::string>()));
  }
  return out;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class ShippedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::DaemonProcessOptions options;
    options.binary = NIELSD_BINARY;  // no model_dir: nielsd must find models/niels-demo itself
    options.socket_path = dir_.path() / "nielsd.sock";
    options.extra_args = {"--threads", "1"};
    daemon_ = testing::DaemonProcess::Start(options);
  }

  testing::ProcessResult Chat(std::vector<std::string> args, const std::string& input = "") {
    std::vector<std::string> argv = {NIELS_CHAT_BINARY, "--socket", daemon_->socket_path().string(), "--greedy"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv, input);
  }

  std::unique_ptr<client::DaemonClient> Connect() {
    auto connected = client::DaemonClient::Connect(daemon_->socket_path().string());
    EXPECT_TRUE(connected.ok()) << connected.status().ToString();
    if (!connected.ok()) return nullptr;
    return std::move(connected).value();
  }

  // The six greedy replies of a fresh default-prompt session; every reply must stop on eot.
  std::vector<std::string> SixTurnsThroughTheLibrary(client::DaemonClient& client, bool use_kv_cache) {
    auto created = client.CreateSession(kDefaultSystem);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    std::vector<std::string> replies;
    for (const std::string& line : kSixTurns) {
      niels::v1::ChatRequest request;
      request.set_session_id(created->session_id());
      request.set_user_text(line);
      request.mutable_sampling()->set_temperature(0);
      request.set_use_kv_cache(use_kv_cache);
      auto reply = client.Chat(request);
      EXPECT_TRUE(reply.ok()) << reply.status().ToString();
      if (!reply.ok()) return replies;
      EXPECT_EQ(reply->stop_reason(), niels::v1::EOT) << "turn \"" << line << "\" replied \"" << reply->reply() << "\"";
      EXPECT_EQ(reply->truncated_turns(), 0);
      EXPECT_EQ(reply->stats().used_kv_cache(), use_kv_cache);
      replies.push_back(reply->reply());
    }
    return replies;
  }

  testing::TempDir dir_{"nielsd_shipped_"};
  std::unique_ptr<testing::DaemonProcess> daemon_;
};

TEST_F(ShippedModelTest, DaemonWithoutModelFlagServesTheShippedModel) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->Info();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->model_name(), "niels-demo");
  EXPECT_NE(info->model_path().find("niels-demo"), std::string::npos) << info->model_path();
  EXPECT_EQ(info->default_system_prompt(), kDefaultSystem);
}

TEST_F(ShippedModelTest, ProbeQuestionsAreNotInTheCorpus) {
  const std::set<std::string> corpus = CorpusQuestions();
  ASSERT_GT(corpus.size(), 100u) << kCorpusFile;
  for (const Probe& p : kCorpusProbes) EXPECT_EQ(corpus.count(Normalize(p.question)), 0u) << p.question;
  for (const std::string& q : kOutOfCorpus) EXPECT_EQ(corpus.count(Normalize(q)), 0u) << q;
}

TEST_F(ShippedModelTest, AnswersParaphrasedCorpusQuestions) {
  for (const Probe& p : kCorpusProbes) {
    testing::ProcessResult result = Chat({"-p", p.question});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_NE(result.out.find(p.key), std::string::npos) << "q: " << p.question << "\nreply: " << result.out;
    EXPECT_EQ(result.out.find(kIdk), std::string::npos) << "q: " << p.question << "\nreply: " << result.out;
  }
}

TEST_F(ShippedModelTest, SaysIDontKnowOutsideTheCorpus) {
  for (const std::string& q : kOutOfCorpus) {
    testing::ProcessResult result = Chat({"-p", q});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_NE(result.out.find(kIdk), std::string::npos) << "q: " << q << "\nreply: " << result.out;
  }
}

TEST_F(ShippedModelTest, SixTurnChatIsTheSameWithAndWithoutKvCache) {
  std::string input;
  for (const std::string& line : kSixTurns) input += line + "\n";
  testing::ProcessResult cached = Chat({}, input);
  testing::ProcessResult uncached = Chat({"--no-kv-cache"}, input);
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  ASSERT_EQ(uncached.exit_code, 0) << uncached.err;
  const std::vector<std::string> replies = SplitLines(cached.out);
  ASSERT_EQ(replies.size(), kSixTurns.size()) << cached.out;
  for (const std::string& r : replies) EXPECT_FALSE(r.empty()) << cached.out;
  EXPECT_EQ(uncached.out, cached.out);

  // The same chat through the client library: every reply stops on eot, on both paths, and equals
  // what niels-chat printed.
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(SixTurnsThroughTheLibrary(*client, /*use_kv_cache=*/true), replies);
  EXPECT_EQ(SixTurnsThroughTheLibrary(*client, /*use_kv_cache=*/false), replies);
}

}  // namespace
}  // namespace niels::integration
