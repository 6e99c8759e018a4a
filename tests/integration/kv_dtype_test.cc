// nielsd --kv-dtype f16 (README.md "KV cache dtype"): a real daemon keeps its KV cache in f16, says
// so in Info, holds half the bytes per block, chats with the cached and the uncached path giving
// the same greedy replies, and, restarted over KV spill files another --kv-dtype wrote, recomputes
// those caches instead of reading them.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::niels::v1;
using ::testing::HasSubstr;

class KvDtypeTest : public IntegrationTest {
 protected:
  void Start(std::vector<std::string> extra) {
    testing::DaemonProcessOptions options = DaemonOptions();
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    daemon_ = testing::DaemonProcess::Start(options);
  }
  std::string NewSession(client::DaemonClient& client, const std::string& system) {
    auto created = client.CreateSession(system);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created->session_id() : "";
  }
  std::string Reply(client::DaemonClient& client, const std::string& id, const std::string& text, int n = 6,
                    bool use_kv_cache = true) {
    v1::ChatRequest request = GreedyChat(id, text, n);
    request.set_use_kv_cache(use_kv_cache);
    auto reply = client.Chat(request);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->reply() : "";
  }
};

TEST_F(KvDtypeTest, F16KvChatsWithHalfTheBlockBytesAndCachedEqualsUncached) {
  Start({"--ephemeral", "--kv-dtype", "f16"});
  auto client = Connect();
  auto info = client->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kv_dtype(), "f16");
  const daemon::model::ModelConfig config = IntegrationConfig();
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  // keys and values of every layer, 2 bytes each, per position of a block.
  EXPECT_EQ(stats->kv_block_bytes(), 2u * config.layers * config.width * 2 * stats->kv_block_tokens());

  const std::string cached = NewSession(*client, "you are terse."), uncached = NewSession(*client, "you are terse.");
  int non_empty = 0;
  for (const char* question : {"hello there", "what is nielsd?", "tell me more", "thanks"}) {
    const std::string reply = Reply(*client, cached, question);
    EXPECT_EQ(Reply(*client, uncached, question, 6, /*use_kv_cache=*/false), reply) << question;
    non_empty += reply.empty() ? 0 : 1;
  }
  EXPECT_GT(non_empty, 0) << "the model answered nothing";
  auto got = client->GetSession(cached);
  ASSERT_TRUE(got.ok());
  EXPECT_GT(got->session().cached_tokens(), 0);
  EXPECT_EQ(got->session().kv_bytes() % stats->kv_block_bytes(), 0);
}

// KV spill files written by an f32 daemon are refused (never misread) by the same state directory
// served with --kv-dtype f16: those sessions' caches are recomputed and the replies are the ones an
// f16 daemon that never spilled gives.
TEST_F(KvDtypeTest, SpillFilesOfAnotherKvDtypeAreRecomputedAfterARestart) {
  std::string long_text;
  for (int i = 0; i < 120; ++i) long_text += fmt::format("line{} ", i);
  std::vector<std::string> reference;  // an f16 daemon with room for every cache
  {
    Start({"--ephemeral", "--kv-dtype", "f16"});
    auto client = Connect();
    for (int s = 0; s < 4; ++s) {
      const std::string id = NewSession(*client, fmt::format("session {}", s));
      Reply(*client, id, long_text + fmt::format("{}", s), 4);
      reference.push_back(Reply(*client, id, "and?", 4));
    }
    ASSERT_EQ(daemon_->Stop(), 0);
  }
  const std::string state = (dir_.path() / "state").string();
  Start({"--state-dir", state, "--kv-budget-mb", "1"});  // f32: evicted caches are spilled
  std::vector<std::string> ids;
  {
    auto client = Connect();
    for (int s = 0; s < 4; ++s) {
      ids.push_back(NewSession(*client, fmt::format("session {}", s)));
      Reply(*client, ids.back(), long_text + fmt::format("{}", s), 4);
    }
    auto stats = client->Stats();
    ASSERT_TRUE(stats.ok());
    ASSERT_GT(stats->kv_spill_writes(), 0u) << "a 1 MiB budget must evict some of 4 long sessions";
  }
  ASSERT_EQ(daemon_->Stop(), 0);
  size_t spill_files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(state) / "kv")) spill_files += entry.path().extension() == ".kv";
  ASSERT_GT(spill_files, 0u) << "no spill file survived the restart";

  Start({"--state-dir", state, "--kv-dtype", "f16"});
  auto client = Connect();
  for (int s = 0; s < 4; ++s) {
    auto reply = client->Chat(GreedyChat(ids[static_cast<size_t>(s)], "and?", 4));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->reply(), reference[static_cast<size_t>(s)]) << s;
  }
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->kv_spill_reads(), 0u);
  EXPECT_THAT(daemon_->log(), HasSubstr("another --kv-dtype"));
}

}  // namespace
}  // namespace niels::integration
