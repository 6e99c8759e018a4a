// Fuzz target: a sharded Hugging Face directory's model.safetensors.index.json (daemon/loaders/
// hf_dir.h): HfWeightFiles, which reads the index, and LoadModel of the whole directory, which
// checks the index against the tensors of its shards.
//
// Input: the index's text. The directory is a tiny llama (family_model.h, the smallest shapes) in
// three shards model-0000i-of-00003.safetensors, on tmpfs when /dev/shm exists; only the index
// changes from input to input. LoadModel runs when HfWeightFiles accepts the index and every shard
// it names exists (the others fail before any weight is read). With NIELS_FUZZ_WRITE_SEEDS=DIR the
// initialisation writes the valid index (valid_index) and one with its shards in another order
// (reordered_index) to DIR.
// Invariants: a refusal names the index or a file of the directory; accepted, HfWeightFiles lists
// the index and then distinct plain file names of the directory, at most 4096 and at most one per
// 6 bytes of the input (each needs a key and a value of its own), and the index was nested within
// kMaxJsonNesting (counted outside strings here). A model loaded through an accepted index has
// the valid directory's shapes (the index must name every tensor in the shard that holds it).

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "daemon/loaders/hf_dir.h"
#include "daemon/loaders/model_loader.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/family_model.h"
#include "tests/support/temp_files.h"

namespace fs = std::filesystem;
namespace model = niels::daemon::model;
namespace loaders = niels::daemon::loaders;

namespace {

constexpr char kIndex[] = "model.safetensors.index.json";
constexpr size_t kMaxShards = 4096;  // hf_dir.cc's bound

fs::path g_work;
model::ModelConfig g_config;

fs::path MakeWorkDir() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) {
    std::string pattern = "/dev/shm/niels_hf_index_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) return pattern;
  }
  return niels::testing::MakeTempDir("niels_hf_index_fuzz_");
}

struct RemoveWorkDirAtExit {
  ~RemoveWorkDirAtExit() {
    std::error_code ec;
    fs::remove_all(g_work, ec);
  }
};

bool NamesThisDirectory(const std::string& message) {
  return message.find(g_work.string()) != std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_work = MakeWorkDir();
  static RemoveWorkDirAtExit remove_work_dir_at_exit;
  g_config = niels::testing::TinyFamilyConfig(model::Architecture::kLlama);
  g_config.width = 16;
  g_config.layers = 1;
  g_config.heads = 2;
  g_config.kv_heads = 1;
  g_config.head_size = 8;
  g_config.d_ff = 32;
  niels::testing::MakeHfModel(g_config, niels::testing::TinyFamilyWeights(g_config, 1)).Write(g_work, 3);
  FUZZ_CHECK(loaders::LoadModel(g_work).ok());
  if (const char* seeds = std::getenv("NIELS_FUZZ_WRITE_SEEDS")) {
    const std::string valid = niels::testing::ReadFile(g_work / kIndex);
    fs::create_directories(seeds);
    niels::testing::WriteFile(fs::path(seeds) / "valid_index", valid);
    // The same map with its entries in reverse order: the shards are then opened in another order.
    nlohmann::ordered_json index = nlohmann::ordered_json::parse(valid);
    std::vector<std::pair<std::string, nlohmann::ordered_json>> entries;
    for (const auto& item : index["weight_map"].items()) entries.emplace_back(item.key(), item.value());
    nlohmann::ordered_json reversed = nlohmann::ordered_json::object();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) reversed[it->first] = it->second;
    index["weight_map"] = reversed;
    niels::testing::WriteFile(fs::path(seeds) / "reordered_index", index.dump(1));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  niels::testing::WriteFile(g_work / kIndex, text);
  auto files = loaders::HfWeightFiles(g_work);
  if (!files.ok()) {
    FUZZ_CHECK(files.status().code() == niels::common::StatusCode::kInvalidArgument);
    FUZZ_CHECK(files.status().message().find((g_work / kIndex).string()) != std::string::npos);
    return 0;
  }
  FUZZ_CHECK(niels::fuzz::JsonBracketDepth(text) <= niels::common::kMaxJsonNesting);
  FUZZ_CHECK(!files->empty() && files->front() == g_work / kIndex);
  const size_t shards = files->size() - 1;
  FUZZ_CHECK(shards >= 1 && shards <= kMaxShards && shards <= size / 6);
  std::set<fs::path> seen;
  bool all_exist = true;
  for (size_t i = 1; i < files->size(); ++i) {
    const fs::path& file = (*files)[i];
    FUZZ_CHECK(file.parent_path() == g_work);
    const std::string name = file.filename().string();
    FUZZ_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos);
    FUZZ_CHECK(seen.insert(file).second);
    std::error_code ec;
    all_exist = all_exist && fs::is_regular_file(file, ec);
  }
  if (!all_exist) return 0;
  auto loaded = loaders::LoadModel(g_work);
  if (!loaded.ok()) {
    FUZZ_CHECK(NamesThisDirectory(loaded.status().message()));
    return 0;
  }
  const model::ModelConfig& c = (*loaded)->config;
  FUZZ_CHECK(c.width == g_config.width && c.layers == g_config.layers && c.vocab_size == g_config.vocab_size);
  return 0;
}
