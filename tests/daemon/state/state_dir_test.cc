// State directory resolution and preparation, and the model fingerprint.
#include "daemon/state/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/state/model_fingerprint.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::state {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> values) {
  return [values](const char* name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(StateDirTest, ResolutionOrder) {
  const auto all = Env({{"STATE_DIRECTORY", "/var/lib/nielsd"}, {"XDG_STATE_HOME", "/x/state"}, {"HOME", "/home/u"}});
  EXPECT_EQ(ResolveStateDir("/flag", all).value(), fs::path("/flag"));
  EXPECT_EQ(ResolveStateDir("", all).value(), fs::path("/var/lib/nielsd"));
  EXPECT_EQ(ResolveStateDir("", Env({{"STATE_DIRECTORY", "/a:/b"}})).value(), fs::path("/a"));
  EXPECT_EQ(ResolveStateDir("", Env({{"XDG_STATE_HOME", "/x/state"}, {"HOME", "/home/u"}})).value(),
            fs::path("/x/state/nielsd"));
  EXPECT_EQ(ResolveStateDir("", Env({{"XDG_STATE_HOME", "relative"}, {"HOME", "/home/u"}})).value(),
            fs::path("/home/u/.local/state/nielsd"));
  EXPECT_EQ(ResolveStateDir("", Env({{"HOME", "/home/u"}})).value(), fs::path("/home/u/.local/state/nielsd"));
  auto none = ResolveStateDir("", Env({}));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("--state-dir"));
  EXPECT_THAT(none.status().message(), HasSubstr("--ephemeral"));
}

TEST(StateDirTest, PrepareCreatesMissingParentsPrivately) {
  testing::TempDir dir;
  const fs::path state = dir / "a" / "b" / "nielsd";
  ASSERT_TRUE(PrepareStateDir(state).ok());
  for (const fs::path& p : {dir / "a", dir / "a" / "b", state}) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
  EXPECT_TRUE(fs::is_empty(state));  // the write probe is gone
  EXPECT_TRUE(PrepareStateDir(state).ok());  // existing: fine
}

TEST(StateDirTest, UnusablePathNamesItAndTheWayOut) {
  testing::TempDir dir;
  testing::WriteFile(dir / "file", "x");
  for (const fs::path& bad : {dir / "file", dir / "file" / "nielsd"}) {
    common::Status status = PrepareStateDir(bad);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_THAT(status.message(), HasSubstr(bad.string()));
    EXPECT_THAT(status.message(), HasSubstr("--ephemeral"));
  }
}

TEST(StateDirTest, OneDaemonPerDirectory) {
  testing::TempDir dir;
  auto first = StateDirLock::Acquire(dir.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // flock locks belong to the open file description: a second open in this process conflicts too.
  auto second = StateDirLock::Acquire(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), common::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("pid " + std::to_string(::getpid())));
  { StateDirLock released = std::move(first).value(); }
  EXPECT_TRUE(StateDirLock::Acquire(dir.path()).ok());
}

TEST(ModelFingerprintTest, StableAndSensitiveToEveryFileKind) {
  testing::TempDir dir;
  testing::WriteFile(dir / "config.json", R"({"V": 10})");
  testing::WriteFile(dir / "tokenizer.model", "pieces");
  std::string weights(5 << 20, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 31 % 251);
  testing::WriteFile(dir / "model.safetensors", weights);
  const std::vector<fs::path> files = {dir / "config.json", dir / "model.safetensors", dir / "tokenizer.model"};
  const std::string base = ModelFingerprint(files).value();
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(ModelFingerprint(files).value(), base);

  testing::WriteFile(dir / "config.json", R"({"V": 11})");
  EXPECT_NE(ModelFingerprint(files).value(), base);
  testing::WriteFile(dir / "config.json", R"({"V": 10})");
  EXPECT_EQ(ModelFingerprint(files).value(), base);

  // Retrained weights of the same shape: same header, different numbers everywhere after it.
  std::string retrained = weights;
  for (size_t i = 1 << 20; i < retrained.size(); ++i) retrained[i] ^= 0x5a;
  testing::WriteFile(dir / "model.safetensors", retrained);
  EXPECT_NE(ModelFingerprint(files).value(), base);

  auto missing = ModelFingerprint({dir / "nope.model"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.model"));
}

}  // namespace
}  // namespace niels::daemon::state
