// Fuzz target: the server's connection and dispatcher path (daemon/server/connection.h,
// dispatcher.h, connection_registry.h) with the real handlers::Service and a tiny random-weight
// model (32-token context, as request_fuzz's), over a real Unix socket pair: what a hostile local
// client writes to its socket.
//
// Input: byte 0 flags, byte 1 the seed of the chunk sizes, then the byte stream the client writes
// (delimited Request frames, garbage, partial frames, oversized length prefixes, Cancels).
//   flags bits 0-1: the peer uid (1000, 1001, 65534 = the kernel's overflow uid, which the
//                   dispatcher gives no sessions; 3 is 1000);
//   bits 2-3: how the client ends -- 0 waits for the answers when every request can be answered
//             (the stream is whole frames within the limit), then half-closes (otherwise as 1);
//             1 half-closes at once; 2 keeps its end open when the stream ends in a framing error
//             or a partial frame, and the server must close (at once, or after frame_timeout),
//             otherwise half-closes; 3 closes its socket at once, reading nothing;
//   bit 4: the client reads only after it has written everything (the server's backlog bound).
// The connection has small options: 2048-byte frames, 4 KiB / 16 frames of queued output, 64 KiB
// responses; frame and backlog timeouts of 10 ms in end mode 2 (a stalled frame costs the input
// that long), else 10 s (never reached in a healthy run: a client descheduled on a loaded machine
// is not cut off where it waits for its answers). Every Request frame that parses and names the
// session "$<any byte>" gets the id of a session the harness created for the peer beforehand (ids
// are 128 random bits: the fuzzer could never guess one), and a Chat's or Generate's
// max_new_tokens is cut to at most 8 (unset: 8), and to 1 after the stream's first 8 of them;
// those frames are encoded again, every other byte is sent as it is. The client writes the result
// in chunks of seed-chosen sizes (1 to 2^(seed % 8 + 1) bytes), reading what arrives meanwhile
// (unless bit 4), and reads its end to the end of file.
// Invariants:
//   - every byte read back is a sequence of well-formed Response frames (a partial last one only
//     when the server closed the connection for an error or the client went away early);
//   - every response names a request id the client sent in a frame before the first framing
//     error (id 0 also for a frame that is no Request), so a malformed or oversized frame is never
//     answered; a token event only names a streaming Chat or Generate;
//   - per request id at most as many final responses as frames with that id, and, when the client
//     waited (end mode 0, whole frames), exactly as many: the server neither closed early nor
//     dropped an answer;
//   - the connection ends: the server closes its end within 10 s of the client's half-close, of a
//     framing error or of frame_timeout after a partial frame, leaves the registry and is
//     destroyed;
//   - what the connection left in the engine ends (no request queued or running within 20 s),
//     and afterwards the engine still answers an Info through a fresh Connection. The sessions of
//     the input are deleted at its end.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include "common/frame.h"
#include "common/log.h"
#include "common/protobuf_log.h"
#include "daemon/handlers/service.h"
#include "daemon/server/connection.h"
#include "daemon/server/connection_registry.h"
#include "daemon/server/dispatcher.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/test_model.h"

namespace asio = boost::asio;
namespace engine = niels::daemon::engine;
namespace handlers = niels::daemon::handlers;
namespace server = niels::daemon::server;
using niels::v1::Request;
using niels::v1::Response;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxFrameBytes = 2048;
constexpr uint32_t kOverflowUid = 65534;
constexpr auto kCloseBound = std::chrono::seconds(10);    // the server closes within this
constexpr auto kAnswerBound = std::chrono::seconds(20);   // a waiting client's answers arrive within this

struct Globals {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
  std::unique_ptr<handlers::Service> service;
  server::ConnectionRegistry registry;
  std::unique_ptr<server::Dispatcher> dispatcher;
  server::ConnectionOptions options;
};
Globals* g = nullptr;

// Collects one job's responses (requests the harness itself sends to the Service).
class CollectingSink : public server::ResponseSink {
 public:
  bool Send(Response response, bool final) override {
    std::lock_guard lock(mutex_);
    responses_.push_back(std::move(response));
    if (final) {
      done_ = true;
      cv_.notify_all();
    }
    return true;
  }
  std::vector<Response> Wait() {
    std::unique_lock lock(mutex_);
    FUZZ_CHECK(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_; }));
    return responses_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Response> responses_;
  bool done_ = false;
};

Response RunDirect(Request request, uint32_t uid) {
  auto sink = std::make_shared<CollectingSink>();
  g->service->Submit(server::Job(server::Caller{uid}, std::move(request), std::make_shared<std::atomic<bool>>(false), sink));
  std::vector<Response> responses = sink->Wait();
  FUZZ_CHECK(!responses.empty());
  return responses.back();
}

void DeleteAllSessions(uint32_t uid);

// A new session of `uid`. A session limit reached (a CreateSession of an earlier input that was
// still queued when its connection closed may have added one after the cleanup) clears them all.
std::string CreateSession(uint32_t uid) {
  Request create;
  create.set_request_id(1);
  create.mutable_create_session();
  Response made = RunDirect(create, uid);
  if (!made.has_create_session()) {
    for (uint32_t other : {1000u, 1001u, kOverflowUid}) DeleteAllSessions(other);
    made = RunDirect(create, uid);
  }
  FUZZ_CHECK(made.has_create_session());
  return made.create_session().session_id();
}

void DeleteAllSessions(uint32_t uid) {
  Request list;
  list.set_request_id(2);
  list.mutable_list_sessions();
  const Response listed = RunDirect(list, uid);
  FUZZ_CHECK(listed.has_list_sessions());
  for (const auto& session : listed.list_sessions().sessions()) {
    Request del;
    del.set_request_id(3);
    del.mutable_delete_session()->set_session_id(session.session_id());
    FUZZ_CHECK(RunDirect(del, uid).has_delete_session());
  }
}

// Waits until the engine has no request queued or running: what a closed connection left behind
// (cancelled) has ended, so the next input's requests are not refused for a full queue.
void WaitForIdleEngine() {
  const Clock::time_point deadline = Clock::now() + kAnswerBound;
  for (;;) {
    Request stats;
    stats.set_request_id(4);
    stats.mutable_stats();
    const Response r = RunDirect(stats, 1000);
    if (r.has_stats() && r.stats().queued_requests() == 0 && r.stats().running_sequences() == 0) return;
    FUZZ_CHECK(Clock::now() < deadline);  // cancelled work that never ends
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

std::string* SessionField(Request& r) {
  switch (r.kind_case()) {
    case Request::kChat: return r.mutable_chat()->mutable_session_id();
    case Request::kGenerate: return r.mutable_generate()->mutable_session_id();
    case Request::kGetSession: return r.mutable_get_session()->mutable_session_id();
    case Request::kForkSession: return r.mutable_fork_session()->mutable_session_id();
    case Request::kResetSession: return r.mutable_reset_session()->mutable_session_id();
    case Request::kDeleteSession: return r.mutable_delete_session()->mutable_session_id();
    default: return nullptr;
  }
}

// What the client's stream asks for, as the server will decode it.
struct Sent {
  std::map<uint64_t, int> frames;  // Request frames per id (a frame that is no Request: id 0)
  std::set<uint64_t> streaming;    // ids of streaming Chat/Generate requests
  size_t total = 0;
  bool creates = false;  // a CreateSession or ForkSession
  bool generates = false;  // a Chat or Generate
  bool whole = true;  // every byte is part of a complete frame within the limit
  bool framing_error = false;
};

Sent Expect(const std::string& wire) {
  Sent sent;
  niels::common::FrameDecoder decoder(kMaxFrameBytes);
  decoder.Feed(wire);
  std::string payload;
  for (;;) {
    const auto result = decoder.Next(&payload);
    if (result == niels::common::FrameDecoder::Result::kNeedMore) {
      sent.whole = decoder.buffered_bytes() == 0;
      break;
    }
    if (result == niels::common::FrameDecoder::Result::kError) {
      sent.whole = false;
      sent.framing_error = true;
      break;
    }
    Request request;
    const uint64_t id = niels::common::ParseFrame(payload, &request).ok() ? request.request_id() : 0;
    ++sent.frames[id];
    sent.creates = sent.creates || request.has_create_session() || request.has_fork_session();
    sent.generates = sent.generates || request.has_chat() || request.has_generate();
    ++sent.total;
    if ((request.has_chat() && request.chat().stream()) || (request.has_generate() && request.generate().stream())) {
      sent.streaming.insert(id);
    }
  }
  return sent;
}

// The input's stream with "$x" session ids replaced by a session of `uid` (made on first use) and
// max_new_tokens cut; other bytes as they are.
std::string Rewrite(std::string_view stream, uint32_t uid, bool* made_session) {
  niels::common::FrameDecoder decoder(kMaxFrameBytes);
  decoder.Feed(stream);
  std::string wire, payload, session;
  size_t consumed = 0;
  int generating = 0;
  while (decoder.Next(&payload) == niels::common::FrameDecoder::Result::kFrame) {
    const size_t end = stream.size() - decoder.buffered_bytes();
    Request request;
    bool changed = false;
    if (niels::common::ParseFrame(payload, &request).ok()) {
      std::string* field = SessionField(request);
      if (field != nullptr && field->size() == 2 && (*field)[0] == '$') {
        if (session.empty()) session = CreateSession(uid);
        *field = session;
        changed = true;
      }
      // At most 8 new tokens, and 1 after the stream's first 8 generating requests.
      auto cut = [&](auto* r) {
        const int32_t most = ++generating > 8 ? 1 : 8;
        if (!r->has_max_new_tokens() || r->max_new_tokens() > most) {
          r->set_max_new_tokens(most);
          changed = true;
        }
      };
      if (request.has_chat()) cut(request.mutable_chat());
      if (request.has_generate()) cut(request.mutable_generate());
    }
    if (changed) {
      wire += niels::common::EncodeFrame(request);
    } else {
      wire.append(stream.substr(consumed, end - consumed));
    }
    consumed = end;
  }
  wire.append(stream.substr(consumed));
  *made_session = !session.empty();
  return wire;
}

// The client's end: a non-blocking socket it writes to and reads from.
class Client {
 public:
  explicit Client(int fd) : fd_(fd) { FUZZ_CHECK(::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK) == 0); }
  ~Client() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void HalfClose() { ::shutdown(fd_, SHUT_WR); }

  // Writes `wire` in seed-chosen chunks; reads meanwhile unless `read_late`. False when the server
  // closed before everything was written.
  bool Write(std::string_view wire, uint8_t seed, bool read_late) {
    niels::fuzz::Rng rng(seed);
    const uint64_t largest = uint64_t{2} << (seed % 8);
    const Clock::time_point deadline = Clock::now() + kCloseBound;
    while (!wire.empty()) {
      pollfd p{fd_, static_cast<short>(POLLOUT | (read_late ? 0 : POLLIN)), 0};
      FUZZ_CHECK(Clock::now() < deadline);  // a server that neither reads nor closes
      if (::poll(&p, 1, 100) <= 0) continue;
      if ((p.revents & POLLIN) && !ReadSome()) return false;
      if (p.revents & (POLLERR | POLLHUP)) return false;
      if (p.revents & POLLOUT) {
        const size_t n = std::min<size_t>(wire.size(), rng.Between(1, largest));
        const ssize_t wrote = ::send(fd_, wire.data(), n, MSG_NOSIGNAL);
        if (wrote < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          return false;  // EPIPE, ECONNRESET: the server closed
        }
        wire.remove_prefix(static_cast<size_t>(wrote));
      }
    }
    return true;
  }

  // Reads until `done()` holds or the end of file; false on the end of file (or an error).
  template <typename Done>
  bool ReadUntil(Done done, Clock::duration bound) {
    const Clock::time_point deadline = Clock::now() + bound;
    while (!done()) {
      FUZZ_CHECK(Clock::now() < deadline);  // neither answered nor closed in time
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (!ReadSome()) return false;
    }
    return true;
  }
  void ReadToEnd(Clock::duration bound) {
    ReadUntil([] { return false; }, bound);
  }

  const std::string& received() const { return received_; }

 private:
  // False at the end of file or on an error (the connection is gone).
  bool ReadSome() {
    char buffer[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        received_.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      return false;
    }
  }

  int fd_;
  std::string received_;
};

// The responses in `bytes`; *partial set when a frame is cut off at the end.
std::vector<Response> DecodeResponses(const std::string& bytes, bool* partial) {
  niels::common::FrameDecoder decoder(niels::common::kMaxResponseBytes);
  decoder.Feed(bytes);
  std::vector<Response> responses;
  std::string payload;
  niels::common::FrameDecoder::Result result;
  while ((result = decoder.Next(&payload)) == niels::common::FrameDecoder::Result::kFrame) {
    Response response;
    FUZZ_CHECK(niels::common::ParseFrame(payload, &response).ok());
    FUZZ_CHECK(response.kind_case() != Response::KIND_NOT_SET);
    responses.push_back(std::move(response));
  }
  FUZZ_CHECK(result == niels::common::FrameDecoder::Result::kNeedMore);  // never a corrupt frame
  *partial = decoder.buffered_bytes() != 0;
  return responses;
}

// The server's connections of the current input (each must be destroyed before the input ends).
std::vector<std::weak_ptr<server::Connection>> g_made;

// A connection of `uid` on a fresh socket pair; returns the client's fd. `short_timeouts`: the
// frame and backlog timeouts of 10 ms, else 10 s (which a healthy run never reaches, so that a
// client descheduled for a while on a loaded machine is not cut off where it waits for answers).
int Connect(uint32_t uid, bool short_timeouts) {
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  server::Connection::Socket socket(asio::make_strand(g->io));
  socket.assign(asio::local::stream_protocol(), fds[0]);
  server::ConnectionOptions options = g->options;
  if (!short_timeouts) options.frame_timeout = options.backlog_timeout = kCloseBound;
  auto connection = std::make_shared<server::Connection>(std::move(socket), uid, server::DispatchTo(*g->dispatcher),
                                                         g->registry, options);
  connection->Start();
  g_made.push_back(connection);
  return fds[1];
}

// Every connection has left the registry and been destroyed (its coroutines ended, nothing keeps
// it alive), so nothing of it is freed after the input (libFuzzer's leak check counts mallocs and
// frees per input).
void WaitForNoConnections() {
  const Clock::time_point deadline = Clock::now() + kCloseBound;
  auto alive = [] {
    for (const auto& made : g_made) {
      if (!made.expired()) return true;
    }
    return false;
  };
  while (g->registry.size() != 0 || alive()) {
    FUZZ_CHECK(Clock::now() < deadline);  // a connection that never ends
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  g_made.clear();
}

// An Info through a fresh connection is answered.
void CheckInfo() {
  Client client(Connect(1000, false));
  Request info;
  info.set_request_id(77);
  info.mutable_info();
  FUZZ_CHECK(client.Write(niels::common::EncodeFrame(info), 0, false));
  bool partial = false;
  FUZZ_CHECK(client.ReadUntil(
      [&] { return !DecodeResponses(client.received(), &partial).empty(); }, kAnswerBound));
  const std::vector<Response> responses = DecodeResponses(client.received(), &partial);
  FUZZ_CHECK(responses.size() == 1 && responses[0].request_id() == 77 && responses[0].has_info());
  FUZZ_CHECK(responses[0].info().max_frame_bytes() == kMaxFrameBytes);
  client.HalfClose();
  client.ReadToEnd(kCloseBound);
  FUZZ_CHECK(client.received().size() == niels::common::EncodeFrame(responses[0]).size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  niels::common::SetLogLevel(niels::common::LogLevel::kError);
  niels::common::RouteProtobufLogs();
  g = new Globals();
  g->service = niels::fuzzing::MakeTinyFuzzService("connection");
  server::DispatcherOptions dispatcher_options;
  dispatcher_options.overflow_uid = kOverflowUid;
  dispatcher_options.max_frame_bytes = kMaxFrameBytes;
  g->dispatcher = std::make_unique<server::Dispatcher>(*g->service, g->registry, dispatcher_options);
  g->options.max_frame_bytes = kMaxFrameBytes;
  g->options.max_queued_bytes = 4096;
  g->options.max_queued_frames = 16;
  g->options.max_response_bytes = 64 << 10;
  g->options.backlog_timeout = std::chrono::milliseconds(10);
  g->options.frame_timeout = std::chrono::milliseconds(10);
  g->thread = std::thread([] { g->io.run(); });
  g->thread.detach();  // runs until the process ends
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t flags = in.U8();
  const uint8_t seed = in.U8();
  const uint32_t uids[] = {1000, 1001, kOverflowUid, 1000};
  const uint32_t uid = uids[flags & 3];
  const int end_mode = (flags >> 2) & 3;
  const bool read_late = (flags & 0x10) != 0;

  bool made_session = false;
  const std::string wire = Rewrite(in.Rest(), uid, &made_session);
  const Sent sent = Expect(wire);

  Client client(Connect(uid, end_mode == 2));
  const bool written = client.Write(wire, seed, read_late);
  bool waited = false;
  bool gone_early = false;  // the client closed its socket without reading
  if (end_mode == 3) {
    client.Close();
    gone_early = true;
  } else {
    if (end_mode == 0 && sent.whole && written) {
      // Wait for every final response, then half-close.
      bool partial = false;
      const bool open = client.ReadUntil(
          [&] {
            size_t finals = 0;
            for (const Response& r : DecodeResponses(client.received(), &partial)) finals += !r.has_token();
            return finals >= sent.total;
          },
          kAnswerBound);
      FUZZ_CHECK(open);  // the server does not close a connection whose requests are whole frames
      waited = true;
      client.HalfClose();
    } else if (end_mode == 2 && (sent.framing_error || !sent.whole)) {
      // Keep the end open: the server closes for the framing error or the stalled partial frame.
    } else {
      client.HalfClose();
    }
    client.ReadToEnd(kCloseBound);
  }
  WaitForNoConnections();

  if (!gone_early) {
    bool partial = false;
    const std::vector<Response> responses = DecodeResponses(client.received(), &partial);
    // A cut-off frame only when the server stopped for an error of the client's or the client went
    // away early (a half-close or an unread backlog ends the connection without writing the rest).
    if (partial) FUZZ_CHECK(!waited);
    std::map<uint64_t, int> finals;
    for (const Response& r : responses) {
      FUZZ_CHECK(sent.frames.count(r.request_id()) != 0);  // names a request the client sent
      if (r.has_token()) {
        FUZZ_CHECK(sent.streaming.count(r.request_id()) != 0);
      } else {
        ++finals[r.request_id()];
      }
    }
    for (const auto& [id, n] : finals) FUZZ_CHECK(n <= sent.frames.at(id));
    if (waited) {
      FUZZ_CHECK(finals == sent.frames);  // every request answered exactly once
    }
  }

  if (sent.generates || sent.total > 16) WaitForIdleEngine();
  if (made_session || sent.creates) {
    DeleteAllSessions(uid);
  }
  CheckInfo();
  WaitForNoConnections();
  return 0;
}
