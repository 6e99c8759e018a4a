// nielsd's weights as the kernel sees them: used straight from the memory mapping of
// model.safetensors (no copy when the dtype is kept), so that two daemons on one model share the
// page cache's pages; and no libtorch or BLAS in the process (it would cost seconds at start-up).
#include <fstream>
#include <sstream>
#include <string>

#include "tests/integration/integration_fixture.h"

namespace niels::integration {
namespace {

// Sums of the smaps fields (kB) over the mappings of `file` in process `pid`.
struct MappingFigures {
  // Shared_* counts pages mapped by more than one process; a page is "dirty" there when the page
  // cache has not written it back yet (a freshly written file), which says nothing about copies.
  // Private_Dirty would be copies made by writing to the mapping.
  int64_t rss_kb = 0, shared_kb = 0, private_dirty_kb = 0;
  bool found = false;
};

MappingFigures Smaps(pid_t pid, const std::filesystem::path& file) {
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  MappingFigures figures;
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    const bool header = !line.empty() && line.find(':') != std::string::npos && line.find(' ') < line.find(':');
    if (header) {  // "start-end perms offset dev inode path"
      inside = line.size() >= file.string().size() &&
               line.compare(line.size() - file.string().size(), std::string::npos, file.string()) == 0;
      figures.found = figures.found || inside;
      continue;
    }
    if (!inside) continue;
    std::istringstream fields(line);
    std::string key;
    int64_t kb = 0;
    fields >> key >> kb;
    if (key == "Rss:") figures.rss_kb += kb;
    if (key == "Shared_Clean:" || key == "Shared_Dirty:") figures.shared_kb += kb;
    if (key == "Private_Dirty:") figures.private_dirty_kb += kb;
  }
  return figures;
}

std::string Maps(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  return std::string(std::istreambuf_iterator<char>(maps), {});
}

class WeightsMappingTest : public IntegrationTest {};

TEST_F(WeightsMappingTest, TwoDaemonsShareTheMappedWeightPagesAndLoadNoLibtorch) {
  StartDaemon();
  testing::DaemonProcessOptions second_options = DaemonOptions();
  second_options.socket_path = dir_.path() / "second.sock";
  second_options.log_file = dir_.path() / "second.log";
  second_options.env["STATE_DIRECTORY"] = (dir_.path() / "second-state").string();  // one state dir each
  auto second = testing::DaemonProcess::Start(second_options);
  // A reply from each: every weight page has been read by both.
  for (const std::filesystem::path& socket : {socket_path(), second_options.socket_path}) {
    auto client = client::DaemonClient::Connect(socket.string());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto created = (*client)->CreateSession(std::string("you are terse."));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    ASSERT_TRUE((*client)->Chat(GreedyChat(created->session_id(), "where is the socket?", 4)).ok());
  }
  const std::filesystem::path weights = model_dir() / "model.safetensors";
  const int64_t file_kb = static_cast<int64_t>(std::filesystem::file_size(weights) / 1024);
  for (pid_t pid : {daemon_->pid(), second->pid()}) {
    const MappingFigures m = Smaps(pid, weights);
    ASSERT_TRUE(m.found) << "model.safetensors is not mapped by " << pid;
    EXPECT_GE(m.rss_kb, file_kb * 9 / 10) << "the weights are read from the mapping";
    EXPECT_GE(m.shared_kb, file_kb * 9 / 10) << "pages are shared with the other daemon";
    EXPECT_EQ(m.private_dirty_kb, 0) << "no page of the mapping was written (copied)";
    const std::string maps = Maps(pid);
    EXPECT_EQ(maps.find("libtorch"), std::string::npos) << "nielsd loaded libtorch";
    EXPECT_EQ(maps.find("libopenblas"), std::string::npos) << "nielsd loaded OpenBLAS";
  }
}

}  // namespace
}  // namespace niels::integration
