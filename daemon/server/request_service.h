#pragma once
// RequestService: what the server sees of the model side. The server (daemon/server) never touches
// libtorch, sessions or KV caches; it decodes frames, handles Cancel itself, and hands every other
// request to the service as a Job. nielsd's service is handlers::Service (daemon/handlers), which
// turns each request into typed work for the engine; server tests use a FakeService.
//
// Threading: Submit() is thread-safe and never blocks on model work (it enqueues). Results flow back
// through the Job's ResponseSink, called on the engine thread (or on the submitting thread for a
// request refused at once).

#include <atomic>
#include <cstdint>
#include <memory>

#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

// Who sent a request: the peer uid from SO_PEERCRED on the connection.
struct Caller {
  uint32_t uid = 0;
};

// Receives the responses of one request. Implementations must not block.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Delivers one response (request_id already set). `final` is true for the last one (a result or
  // an Error); stream TokenEvents come before it with final = false.
  // Returns false when the consumer is gone or too far behind (bounded buffer full): the service
  // then cancels the request, restores the session, and sends no further events (a final CANCELLED
  // is still offered).
  virtual bool Send(niels::v1::Response response, bool final) = 0;
};

struct Job {
  Caller caller;
  niels::v1::Request request;                  // any kind except Cancel
  std::shared_ptr<std::atomic<bool>> cancel;   // set by Cancel(request_id) or disconnect; never null
  std::shared_ptr<ResponseSink> sink;          // never null
};

class RequestService {
 public:
  virtual ~RequestService() = default;
  // Enqueues a job. Every job gets exactly one final response through its sink, errors included
  // (UNAVAILABLE after Shutdown, RESOURCE_EXHAUSTED when the queue is full, UNIMPLEMENTED for an
  // unknown request kind, ...). Thread-safe.
  virtual void Submit(Job job) = 0;
  // Cancels every queued and running job (final CANCELLED), stops the model side, and returns when
  // it has stopped. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace niels::daemon::server
