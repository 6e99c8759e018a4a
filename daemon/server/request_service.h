#pragma once
// RequestService: what the server sees of the model side. The server (daemon/server) never touches
// libtorch, sessions or KV caches; it decodes frames, handles Cancel itself, and hands every other
// request to the service as a Job. nielsd's service is handlers::Service (daemon/handlers), which
// turns each request into typed work for the engine; server tests use a FakeService.
//
// Threading: Submit() is thread-safe and never blocks on model work (it enqueues). Results flow back
// through the Job (job.h), on the engine thread (or on the submitting thread for a request refused at
// once).

#include "daemon/server/job.h"

namespace niels::daemon::server {

class RequestService {
 public:
  virtual ~RequestService() = default;
  // Enqueues a job. Every job gets exactly one final response (Job::Finish or Fail), errors included
  // (UNAVAILABLE after Shutdown, RESOURCE_EXHAUSTED when the queue is full, UNIMPLEMENTED for an
  // unknown request kind, ...). Thread-safe.
  virtual void Submit(Job job) = 0;
  // Cancels every queued and running job (final CANCELLED), stops the model side, and returns when
  // it has stopped. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace niels::daemon::server
