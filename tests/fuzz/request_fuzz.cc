// Fuzz target: Request decoding and validation through the real handlers and engine
// (daemon/handlers/service.h) with a tiny random-weight model: every field of every request kind, as
// a hostile client sends it.
//
// Input: a byte stream of delimited Request frames (the wire format; common/frame.h), at most 16
// frames. Each parsed request is submitted and answered before the next (so the order is fixed).
// A session_id of the form "$N" is replaced by the N-th session this input created (ids are 128
// random bits, so the fuzzer could never guess one). Bit 8 of request_id picks the caller (uid 1000
// or 1001); request_id % 7 == 3 sets the cancel flag right after submitting. A Chat or Generate
// without a constraint gets one (structured output) when request_id % 5 == 2: the fuzzed
// Constraint fields are reached too, and the mutator starts from real schemas and grammars.
// Invariants: every request gets exactly one final response, after all its events; every response
// carries the request's id; a final is an Error or the result of the request's own kind; stream
// events only for a streaming Chat/Generate; a streamed Chat's events spell out its reply; a
// constrained Chat's reply (a Generate's new ids, detokenized) is a sentence of its grammar -- a
// prefix of one when it stopped CONSTRAINT_INCOMPLETE -- checked with a matcher of its own; the
// engine still answers Info afterwards. Each input deletes its sessions at the end.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/frame.h"
#include "common/log.h"
#include "common/protobuf_log.h"
#include "daemon/grammar/matcher.h"
#include "daemon/handlers/constraint.h"
#include "daemon/handlers/service.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/test_model.h"

namespace engine = niels::daemon::engine;
namespace handlers = niels::daemon::handlers;
namespace server = niels::daemon::server;
using niels::v1::Request;
using niels::v1::Response;

namespace {

handlers::Service* g_engine = nullptr;

// Collects one job's responses.
class CollectingSink : public server::ResponseSink {
 public:
  bool Send(Response response, bool final) override {
    std::lock_guard lock(mutex_);
    FUZZ_CHECK(!done_);  // nothing after the final response
    responses_.push_back(std::move(response));
    if (final) {
      done_ = true;
      cv_.notify_all();
    }
    return true;
  }
  std::vector<Response> Wait() {
    std::unique_lock lock(mutex_);
    const bool done = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_; });
    FUZZ_CHECK(done);  // every job is answered
    return responses_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Response> responses_;
  bool done_ = false;
};

std::vector<Response> Run(Request request, uint32_t uid, bool cancel_at_once) {
  auto sink = std::make_shared<CollectingSink>();
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  g_engine->Submit(server::Job(server::Caller{uid}, std::move(request), cancel, sink));
  if (cancel_at_once) cancel->store(true);
  return sink->Wait();
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

void DeleteAllSessions(uint32_t uid) {
  Request list;
  list.set_request_id(1);
  list.mutable_list_sessions();
  const std::vector<Response> listed = Run(list, uid, false);
  FUZZ_CHECK(listed.size() == 1 && listed[0].has_list_sessions());
  for (const auto& session : listed[0].list_sessions().sessions()) {
    Request del;
    del.set_request_id(2);
    del.mutable_delete_session()->set_session_id(session.session_id());
    const std::vector<Response> deleted = Run(del, uid, false);
    FUZZ_CHECK(deleted.size() == 1 && deleted[0].has_delete_session());
  }
}

// The constraint attached to request_id % 5 == 2 requests that have none (by request_id / 5 % 4).
niels::v1::Constraint PresetConstraint(uint64_t request_id) {
  niels::v1::Constraint c;
  switch ((request_id / 5) % 4) {
    case 0: c.mutable_any_json(); break;
    case 1: c.set_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x","\u00fc"]}},"required":["a"]})"); break;
    case 2: c.set_gbnf("root ::= (\"yes\" | \"no\") [a-z\\u4e2d]{0,3}\n"); break;
    default: c.set_gbnf("root ::= [0-9]+ (\",\" [0-9]+)*\n"); break;
  }
  return c;
}

niels::v1::Constraint* ConstraintField(Request& r) {
  if (r.has_chat()) return r.mutable_chat()->mutable_constraint();
  if (r.has_generate()) return r.mutable_generate()->mutable_constraint();
  return nullptr;
}

// The text a constrained request generated: the Chat reply, or the Generate's new ids detokenized
// (its stop id decodes to nothing).
std::string GeneratedText(const Response& final_response, uint32_t uid) {
  if (final_response.has_chat()) return final_response.chat().reply();
  Request detokenize;
  detokenize.set_request_id(4);
  detokenize.mutable_detokenize()->mutable_ids()->CopyFrom(final_response.generate().new_ids());
  const std::vector<Response> decoded = Run(detokenize, uid, false);
  FUZZ_CHECK(decoded.size() == 1 && decoded[0].has_detokenize());
  return decoded[0].detokenize().text();
}

// A completed constrained request's text follows its grammar (a prefix when incomplete).
void CheckConstrained(const Request& request, const Response& final_response, uint32_t uid) {
  const bool chat = request.has_chat();
  const niels::v1::Constraint& constraint = chat ? request.chat().constraint() : request.generate().constraint();
  auto grammar = handlers::CompileConstraint(true, constraint);
  FUZZ_CHECK(grammar.ok());  // the daemon compiled it, so must we
  const niels::v1::StopReason stop =
      chat ? final_response.chat().stop_reason() : final_response.generate().stop_reason();
  niels::daemon::grammar::Matcher matcher(*grammar);
  FUZZ_CHECK(matcher.AcceptBytes(GeneratedText(final_response, uid)).ok());
  if (stop != niels::v1::CONSTRAINT_INCOMPLETE) FUZZ_CHECK(matcher.IsComplete());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every input is hostile by design: log only errors, and route libprotobuf's complaints about
  // invalid UTF-8 through nielsd's (rate-limited) logger as nielsd does, instead of one stderr
  // line per string field.
  niels::common::SetLogLevel(niels::common::LogLevel::kError);
  niels::common::RouteProtobufLogs();
  g_engine = niels::fuzzing::MakeTinyFuzzService("request").release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::common::FrameDecoder decoder(1u << 16);
  decoder.Feed(std::string_view(reinterpret_cast<const char*>(data), size));
  std::vector<std::string> created;
  std::string payload;
  for (int n = 0; n < 16 && decoder.Next(&payload) == niels::common::FrameDecoder::Result::kFrame; ++n) {
    Request request;
    if (!niels::common::ParseFrame(payload, &request).ok()) continue;
    if (request.kind_case() == Request::KIND_NOT_SET || request.has_cancel()) continue;  // the server's part
    if (std::string* session = SessionField(request); session && session->size() == 2 && (*session)[0] == '$') {
      *session = created.empty() ? std::string("0123456789abcdef0123456789abcdef")
                                 : created[static_cast<size_t>((*session)[1]) % created.size()];
    }
    niels::v1::Constraint* constraint = ConstraintField(request);
    const bool had_constraint = request.has_chat() ? request.chat().has_constraint()
                                                   : request.has_generate() && request.generate().has_constraint();
    if (constraint != nullptr && !had_constraint && request.request_id() % 5 == 2) {
      *constraint = PresetConstraint(request.request_id());
    }
    const bool constrained = request.has_chat() ? request.chat().has_constraint()
                                                : request.has_generate() && request.generate().has_constraint();
    const uint32_t uid = (request.request_id() & 0x100) ? 1001 : 1000;
    const bool cancel = request.request_id() % 7 == 3;
    const std::vector<Response> responses = Run(request, uid, cancel);

    FUZZ_CHECK(!responses.empty());
    const Response& final_response = responses.back();
    std::string streamed;
    for (size_t i = 0; i < responses.size(); ++i) {
      FUZZ_CHECK(responses[i].request_id() == request.request_id());
      if (i + 1 < responses.size()) {
        FUZZ_CHECK(responses[i].has_token());
        FUZZ_CHECK((request.has_chat() && request.chat().stream()) ||
                   (request.has_generate() && request.generate().stream()));
        FUZZ_CHECK(responses[i].token().index() == static_cast<int32_t>(i));
        streamed += responses[i].token().text();
      }
    }
    FUZZ_CHECK(!final_response.has_token());
    if (final_response.has_error()) {
      FUZZ_CHECK(final_response.error().code() != niels::v1::ERROR_CODE_UNSPECIFIED);
      FUZZ_CHECK(final_response.error().code() != niels::v1::INTERNAL);
      continue;
    }
    FUZZ_CHECK(static_cast<int>(final_response.kind_case()) == static_cast<int>(request.kind_case()));
    if (request.has_chat() && request.chat().stream()) FUZZ_CHECK(streamed == final_response.chat().reply());
    if (constrained) CheckConstrained(request, final_response, uid);
    if (final_response.has_create_session()) created.push_back(final_response.create_session().session_id());
    if (final_response.has_fork_session()) created.push_back(final_response.fork_session().session_id());
  }
  DeleteAllSessions(1000);
  DeleteAllSessions(1001);
  Request info;
  info.set_request_id(3);
  info.mutable_info();
  const std::vector<Response> alive = Run(info, 1000, false);
  FUZZ_CHECK(alive.size() == 1 && alive[0].has_info());
  return 0;
}
