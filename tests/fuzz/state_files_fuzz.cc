// Fuzz target: the durable state nielsd reads back at a restart (daemon/state): a session's KV
// spill file (kv_spill_file.h, PeekKvSpillPositions and ReadKvSpill) and a session's row in the
// session database (session_db.h, SessionDb::Load: the token and turn blobs, the sizes beside
// them, and the conversation as JSON).
//
// Input: byte 0 selects the mode and carries flags.
//   even: a KV spill file. Bytes 1-4 give the cache the reader expects (layers 1-3, heads 1-2,
//         head dim 1-4, positions 0-15; flag 0x08 of byte 0: f16, else f32); the rest is the file.
//         Flag 0x02: the 80-byte header of that cache is written before the rest (so the rest is
//         the range table), flag 0x04: the correct XXH3-64 trailer is appended (so the checksum
//         does not stop every mutation).
//   odd:  a session row. Bytes 1-2 are system_end, then a 16-bit length L and L bytes of the
//         tokens blob, a 16-bit length M and M bytes of the turns blob; the rest is the messages
//         column (NULL when flag 0x02 is set). Flag 0x04: the row's length and turn_count columns
//         are computed from the blobs and the messages (else two 16-bit values after system_end
//         give them), so the size check does not stop every mutation.
// The files live in a temp directory (tmpfs when /dev/shm exists); the database is opened once and
// one session row is rewritten per input through a second SQLite connection, as another program
// (or a damaged disk) would.
// Invariants: a refused spill file is "damaged KV spill file ..." and passes nothing to the sink;
// an accepted one passes ranges that cover [0, positions) of every layer and kind exactly once,
// with at most one range per 24 bytes of the file and no more data than the file holds, and the
// same ranges written again (KvSpillWriter) give a file of the same size that reads back the same.
// A refused row is INTERNAL "stored session ... is damaged"; a loaded one has a consistent history
// (HistoryProblem), as many tokens and turns as its columns say, no more bytes of tokens, turns
// and message text than the input holds, and messages nested within kMaxJsonNesting.

#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/bounded_json.h"
#include "daemon/state/kv_spill_file.h"
#include "daemon/state/session_db.h"
#include "daemon/state/sqlite.h"
#include "daemon/state/stored_session.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/temp_files.h"

namespace fs = std::filesystem;
namespace state = niels::daemon::state;

namespace {

constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef";
constexpr char kSessionId[] = "0123456789abcdef0123456789abcdef";

fs::path g_work;
std::unique_ptr<state::SessionDb> g_db;
state::SqliteConnection g_raw;  // the second connection that damages the row

fs::path MakeWorkDir() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) {
    std::string pattern = "/dev/shm/niels_state_files_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) return pattern;
  }
  return niels::testing::MakeTempDir("niels_state_files_fuzz_");
}

struct RemoveWorkDirAtExit {
  ~RemoveWorkDirAtExit() {
    g_db.reset();
    g_raw = state::SqliteConnection();
    std::error_code ec;
    fs::remove_all(g_work, ec);
  }
};

template <typename T>
void Append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// The 80-byte header kv_spill_file.h documents, for `header`.
std::string SpillHeaderBytes(const state::KvSpillHeader& header) {
  std::string out("NIELSKV\0", 8);
  Append<uint32_t>(out, 1);
  Append<uint32_t>(out, static_cast<uint32_t>(header.dtype));
  Append<uint32_t>(out, header.layers);
  Append<uint32_t>(out, header.heads);
  Append<uint32_t>(out, header.head_dim);
  Append<uint32_t>(out, 0);
  Append<uint64_t>(out, static_cast<uint64_t>(header.positions));
  Append<uint64_t>(out, header.tokens_hash);
  out.append(header.model_fingerprint);
  return out;
}

struct ReadRange {
  uint32_t layer;
  state::KvKind kind;
  int64_t begin;
  int64_t count;
  std::string data;
};

// ReadKvSpill into a list; `status` is its result.
std::vector<ReadRange> ReadSpill(const fs::path& path, const state::KvSpillHeader& expected,
                                 niels::common::Status* status) {
  const size_t bytes_per_position =
      size_t{expected.heads} * expected.head_dim * state::KvSpillDtypeSize(expected.dtype);
  std::vector<ReadRange> ranges;
  *status = state::ReadKvSpill(path, expected, [&](const state::KvSpillRange& r) {
    FUZZ_CHECK(r.count >= 0 && r.count <= expected.positions);
    ranges.push_back({r.layer, r.kind, r.begin, r.count,
                      std::string(static_cast<const char*>(r.data), static_cast<size_t>(r.count) * bytes_per_position)});
  });
  return ranges;
}

void CheckSpillFile(niels::fuzz::ByteReader& in, uint8_t flags) {
  state::KvSpillHeader expected;
  expected.model_fingerprint = kFingerprint;
  expected.dtype = (flags & 0x08) != 0 ? state::KvSpillDtype::kF16 : state::KvSpillDtype::kF32;
  expected.layers = 1 + in.U8() % 3;
  expected.heads = 1 + in.U8() % 2;
  expected.head_dim = 1 + in.U8() % 4;
  expected.positions = in.U8() % 16;
  std::vector<int32_t> tokens(static_cast<size_t>(expected.positions));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 + 1);
  expected.tokens_hash = state::HashTokens(tokens);

  std::string file = (flags & 0x02) != 0 ? SpillHeaderBytes(expected) : std::string();
  file.append(in.Rest());
  if ((flags & 0x04) != 0) Append<uint64_t>(file, XXH3_64bits(file.data(), file.size()));
  const fs::path path = g_work / "session.kv";
  niels::testing::WriteFile(path, file);

  auto peeked = state::PeekKvSpillPositions(path);
  if (peeked.ok()) {
    FUZZ_CHECK(file.size() >= 80 && std::memcmp(file.data(), "NIELSKV\0", 8) == 0);
  } else {
    FUZZ_CHECK(peeked.status().code() == niels::common::StatusCode::kInternal);
  }

  niels::common::Status status;
  const std::vector<ReadRange> ranges = ReadSpill(path, expected, &status);
  if (!status.ok()) {
    FUZZ_CHECK(ranges.empty());
    FUZZ_CHECK(status.code() == niels::common::StatusCode::kInternal);
    FUZZ_CHECK(status.message().find("damaged KV spill file " + path.string()) != std::string::npos);
    return;
  }
  FUZZ_CHECK(peeked.ok() && *peeked == expected.positions);
  // Exact coverage, checked here independently of the reader's own check.
  std::map<std::pair<uint32_t, state::KvKind>, std::vector<std::pair<int64_t, int64_t>>> spans;
  size_t data_bytes = 0;
  for (const ReadRange& r : ranges) {
    FUZZ_CHECK(r.layer < expected.layers);
    FUZZ_CHECK(r.kind == state::KvKind::kKeys || r.kind == state::KvKind::kValues);
    FUZZ_CHECK(r.begin >= 0 && r.begin + r.count <= expected.positions);
    if (r.count > 0) spans[{r.layer, r.kind}].emplace_back(r.begin, r.begin + r.count);
    data_bytes += r.data.size();
  }
  FUZZ_CHECK(spans.size() == (expected.positions == 0 ? 0 : 2 * size_t{expected.layers}));
  for (auto& [stream, list] : spans) {
    std::sort(list.begin(), list.end());
    int64_t covered = 0;
    for (const auto& [begin, end] : list) {
      FUZZ_CHECK(begin == covered);
      covered = end;
    }
    FUZZ_CHECK(covered == expected.positions);
  }
  // Work and memory: one range per 24-byte range header, no more data than the file holds.
  FUZZ_CHECK(ranges.size() <= (file.size() - 88) / 24);
  FUZZ_CHECK(data_bytes + 24 * ranges.size() + 88 == file.size());

  // Written again: the same size and the same ranges.
  const fs::path again = g_work / "again.kv";
  auto writer = state::KvSpillWriter::Create(again, expected);
  FUZZ_CHECK(writer.ok());
  for (const ReadRange& r : ranges) {
    FUZZ_CHECK((*writer)
                   ->AddRange(r.layer, r.kind, r.begin, r.count, r.data.data(),
                              r.count * static_cast<int64_t>(expected.head_dim))
                   .ok());
  }
  auto written = (*writer)->Finish();
  FUZZ_CHECK(written.ok() && *written == file.size());
  niels::common::Status again_status;
  const std::vector<ReadRange> reread = ReadSpill(again, expected, &again_status);
  FUZZ_CHECK(again_status.ok() && reread.size() == ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    FUZZ_CHECK(reread[i].layer == ranges[i].layer && reread[i].kind == ranges[i].kind &&
               reread[i].begin == ranges[i].begin && reread[i].count == ranges[i].count &&
               reread[i].data == ranges[i].data);
  }
}

void CheckSessionRow(niels::fuzz::ByteReader& in, uint8_t flags, size_t input_size) {
  const int64_t system_end = static_cast<int16_t>(in.U16());
  const bool computed_sizes = (flags & 0x04) != 0;
  const int64_t given_length = computed_sizes ? 0 : in.U16();
  const int64_t given_turn_count = computed_sizes ? 0 : in.U16();
  const std::string_view tokens = in.Bytes(in.U16());
  const std::string_view turns = in.Bytes(in.U16());
  const bool null_messages = (flags & 0x02) != 0;
  const std::string_view messages = in.Rest();

  auto update = g_raw.Prepare(
      "UPDATE sessions SET system_end = ?1, length = ?2, turn_count = ?3, tokens = ?4, turns = ?5, messages = ?6 "
      "WHERE id = ?7");
  FUZZ_CHECK(update.ok());
  update->BindInt(1, system_end);
  // Computed: the turns plus the exchanges of the conversation (half its messages when it is an array).
  int64_t exchanges = 0;
  if (!null_messages) {
    auto array = niels::common::ParseJsonBounded(messages, "messages");
    if (array.ok() && array->is_array()) exchanges = static_cast<int64_t>(array->size() / 2);
  }
  update->BindInt(2, computed_sizes ? static_cast<int64_t>(tokens.size() / 4) : given_length);
  update->BindInt(3, computed_sizes ? static_cast<int64_t>(turns.size() / 16) + exchanges : given_turn_count);
  update->BindBlob(4, std::span(reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size()));
  update->BindBlob(5, std::span(reinterpret_cast<const uint8_t*>(turns.data()), turns.size()));
  if (null_messages) {
    update->BindNull(6);
  } else {
    update->BindText(6, messages);
  }
  update->BindText(7, kSessionId);
  FUZZ_CHECK(update->Run().ok());

  auto loaded = g_db->Load(kSessionId);
  if (!loaded.ok()) {
    FUZZ_CHECK(loaded.status().code() == niels::common::StatusCode::kInternal);
    FUZZ_CHECK(loaded.status().message().find(std::string("stored session ") + kSessionId + " is damaged") !=
               std::string::npos);
    return;
  }
  FUZZ_CHECK(loaded->has_value());
  const state::StoredSession& session = **loaded;
  FUZZ_CHECK(state::HistoryProblem(session.history).empty());
  FUZZ_CHECK(static_cast<int64_t>(session.history.tokens.size()) == session.summary.length);
  FUZZ_CHECK(session.history.turn_count() == session.summary.turn_count);
  FUZZ_CHECK(session.history.tokens.size() * 4 == tokens.size());
  FUZZ_CHECK(session.history.turns.size() * 16 == turns.size());
  size_t message_bytes = 0;
  for (const state::StoredMessage& m : session.history.messages) {
    message_bytes += m.role.size() + m.content.size() + m.reasoning.size();
  }
  FUZZ_CHECK(tokens.size() + turns.size() + message_bytes <= input_size);
  if (!session.history.messages.empty()) {
    FUZZ_CHECK(niels::fuzz::JsonBracketDepth(messages) <= niels::common::kMaxJsonNesting);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_work = MakeWorkDir();
  static RemoveWorkDirAtExit remove_work_dir_at_exit;
  auto db = state::SessionDb::Open(g_work / "sessions.db");
  FUZZ_CHECK(db.ok());
  g_db = std::move(db).value();
  state::StoredSession session;
  session.summary.id = kSessionId;
  session.summary.owner = 1000;
  session.summary.model_fingerprint = kFingerprint;
  session.summary.model_name = "tiny";
  session.history.tokens = {1, 2, 3};
  session.summary.length = 3;
  FUZZ_CHECK(g_db->Insert(session).ok());
  auto raw = state::SqliteConnection::Open((g_work / "sessions.db").string());
  FUZZ_CHECK(raw.ok());
  g_raw = std::move(raw).value();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t flags = in.U8();
  if ((flags & 1) == 0) {
    CheckSpillFile(in, flags);
  } else {
    CheckSessionRow(in, flags, size);
  }
  return 0;
}
