// The Python client example (client/python/example.py) against a live nielsd, with Debian's python3
// and the nielsd_client package staged in the build tree (PYTHONPATH).
#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

class PythonExampleTest : public IntegrationTest {};

TEST_F(PythonExampleTest, ExampleRunsAgainstALiveDaemon) {
  StartDaemon();
  auto result = testing::RunProcess(
      {"/usr/bin/python3", std::string(NIELS_SOURCE_DIR) + "/client/python/example.py", "--socket",
       socket_path().string(), "--max-new-tokens", "8"},
      "", {{"PYTHONPATH", NIELS_PYTHON_PACKAGE_DIR}});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("reply:"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("token   0"), std::string::npos) << result.out;
  // It cleaned up after itself.
  auto client = Connect();
  auto listed = client->ListSessions();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->sessions_size(), 0);
}

TEST_F(PythonExampleTest, ExampleReportsAnUnreachableDaemon) {
  auto result = testing::RunProcess(
      {"/usr/bin/python3", std::string(NIELS_SOURCE_DIR) + "/client/python/example.py", "--socket",
       (dir_.path() / "none.sock").string()},
      "", {{"PYTHONPATH", NIELS_PYTHON_PACKAGE_DIR}});
  EXPECT_EQ(result.exit_code, 2) << result.err;
}

}  // namespace
}  // namespace niels::integration
