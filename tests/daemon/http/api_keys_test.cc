#include "daemon/http/api_keys.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/temp_files.h"

namespace niels::daemon::http {
namespace {

constexpr std::string_view kAliceKey = "alice-key-0123456789abcdef";
constexpr std::string_view kBobKey = "bob-key-0123456789abcdefgh";

TEST(ApiKeysTest, KeysCommentsAndBlankLines) {
  const std::string text = std::string("# keys of the lab\n\n   \n") + std::string(kAliceKey) +
                           " alice\r\n\t" + std::string(kBobKey) + "\tbob   \n  # an indented comment\n" +
                           "alice-second-key-0123456789 alice";  // no newline at the end
  common::StatusOr<ApiKeys> keys = ApiKeys::Parse(text, "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->key_count(), 3u);
  ASSERT_EQ(keys->principals().size(), 2u);
  const ApiKeyPrincipal* alice = keys->Find(kAliceKey);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(keys->Find("alice-second-key-0123456789"), alice);  // two keys, one principal
  const ApiKeyPrincipal* bob = keys->Find(kBobKey);
  ASSERT_NE(bob, nullptr);
  EXPECT_EQ(bob->name, "bob");
  EXPECT_NE(alice->owner, bob->owner);
  EXPECT_FALSE(common::IsUidOwner(alice->owner));
  EXPECT_FALSE(common::IsUidOwner(bob->owner));
  EXPECT_EQ(alice->owner, common::PrincipalOwner("alice"));  // the same after a restart
}

TEST(ApiKeysTest, FindTakesOnlyAWholeKey) {
  common::StatusOr<ApiKeys> keys = ApiKeys::Parse(std::string(kAliceKey) + " alice\n", "keys.txt");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->Find(""), nullptr);
  EXPECT_EQ(keys->Find(kAliceKey.substr(0, kAliceKey.size() - 1)), nullptr);  // a prefix
  EXPECT_EQ(keys->Find(std::string(kAliceKey) + "x"), nullptr);              // longer
  std::string changed(kAliceKey);
  changed.back() = 'g';
  EXPECT_EQ(keys->Find(changed), nullptr);
  EXPECT_EQ(keys->Find(std::string(kAliceKey) + std::string(1000, '\0')), nullptr);  // past the padding
  EXPECT_EQ(keys->Find(std::string(100000, 'a')), nullptr);
  EXPECT_NE(keys->Find(kAliceKey), nullptr);
}

TEST(ApiKeysTest, HostileFilesAreRefusedNamingTheFileAndLine) {
  const std::string good = std::string(kAliceKey) + " alice\n";
  struct Case {
    std::string text;
    std::string expected;  // in the message
  };
  const Case cases[] = {
      {good + std::string(kBobKey) + "\n", "line 2: a key without a name"},
      {good + std::string(kBobKey) + " bob extra\n", "line 2: 3 fields"},
      {good + std::string(kAliceKey) + " mallory\n", "line 2: the key of line 1 again"},
      {good + std::string(kAliceKey) + " alice\n", "line 2: the key of line 1 again"},
      {good + std::string(2000, 'k') + " long\n", "line 2: the line is longer than 1024 bytes"},
      {good + "short bob\n", "line 2: the key has 5 characters, fewer than 16"},
      {good + std::string(300, 'k') + " bob\n", "line 2: the key has 300 characters, more than 256"},
      {good + std::string(kBobKey) + "\x01" + " bob\n", "line 2: the key has a character outside printable ASCII"},
      {good + std::string(kBobKey) + " b\xc3\xb6" + "b\n", "line 2: the name has a character other than"},
      {good + std::string(kBobKey) + " bob/../x\n", "line 2: the name has a character other than"},
      {good + std::string(kBobKey) + " " + std::string(65, 'n') + "\n", "line 2: the name has 65 characters"},
      {"", "the file has no key"},
      {"# only a comment\n\n", "the file has no key"},
      {std::string(ApiKeys::kMaxFileBytes + 1, '\n'), "more than 1048576 bytes"},
  };
  for (const Case& c : cases) {
    common::StatusOr<ApiKeys> keys = ApiKeys::Parse(c.text, "/etc/nielsd/keys");
    ASSERT_FALSE(keys.ok()) << c.expected;
    EXPECT_EQ(keys.status().code(), common::StatusCode::kInvalidArgument);
    EXPECT_NE(keys.status().message().find("--api-keys /etc/nielsd/keys"), std::string::npos) << keys.status().message();
    EXPECT_NE(keys.status().message().find(c.expected), std::string::npos) << keys.status().message();
    // A key never appears in a message.
    EXPECT_EQ(keys.status().message().find(kAliceKey), std::string::npos) << keys.status().message();
    EXPECT_EQ(keys.status().message().find(kBobKey), std::string::npos) << keys.status().message();
  }
}

TEST(ApiKeysTest, TooManyKeysAreRefused) {
  std::string text;
  for (size_t i = 0; i <= ApiKeys::kMaxKeys; ++i) text += "key-number-" + std::to_string(100000 + i) + "-x p\n";
  common::StatusOr<ApiKeys> keys = ApiKeys::Parse(text, "k");
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("more than 4096 keys"), std::string::npos) << keys.status().message();
}

TEST(ApiKeysTest, LoadChecksTheFilesMode) {
  testing::TempDir dir("nielsd_api_keys_");
  const std::filesystem::path path = dir / "keys";
  std::ofstream(path) << kAliceKey << " alice\n";
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  common::StatusOr<ApiKeys> loaded = ApiKeys::Load(path.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_NE(loaded->Find(kAliceKey), nullptr);
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(ApiKeys::Load(path.string()).ok());

  for (const mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    common::StatusOr<ApiKeys> refused = ApiKeys::Load(path.string());
    ASSERT_FALSE(refused.ok()) << std::oct << mode;
    EXPECT_EQ(refused.status().code(), common::StatusCode::kInvalidArgument);
    char expected[64];
    std::snprintf(expected, sizeof(expected), "mode %04o", static_cast<unsigned>(mode));
    EXPECT_NE(refused.status().message().find(expected), std::string::npos) << refused.status().message();
    EXPECT_NE(refused.status().message().find(path.string()), std::string::npos) << refused.status().message();
  }

  EXPECT_EQ(ApiKeys::Load((dir / "missing").string()).status().code(), common::StatusCode::kNotFound);
  common::StatusOr<ApiKeys> directory = ApiKeys::Load(dir.path().string());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos)
      << directory.status().message();
}

TEST(OwnerTest, PrincipalsNeverMeetAUid) {
  for (const char* name : {"", "a", "alice", "root", "0", "4294967295", "1000"}) {
    const common::OwnerId owner = common::PrincipalOwner(name);
    EXPECT_FALSE(common::IsUidOwner(owner)) << name;
    EXPECT_GE(owner, common::kFirstPrincipalOwner) << name;
    EXPECT_LT(owner, uint64_t{1} << 49) << name;
  }
  EXPECT_TRUE(common::IsUidOwner(common::UidOwner(0)));
  EXPECT_TRUE(common::IsUidOwner(common::UidOwner(UINT32_MAX)));
  EXPECT_EQ(common::DescribeOwner(common::UidOwner(1000)), "uid 1000");
  EXPECT_EQ(common::DescribeOwner(common::PrincipalOwner("alice")).rfind("API-key principal 0x", 0), 0u);
}

}  // namespace
}  // namespace niels::daemon::http
