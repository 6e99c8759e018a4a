#pragma once
// Job: one request on its way through the model side, and the way back to its client: the caller's
// identity, the request, its cancel flag and the sink its responses go to. The Dispatcher makes one per
// request (every kind but Cancel) and hands it to the RequestService.
//
// Every job is answered exactly once: Finish() or Fail() sends the final response; only the first
// final is sent. Stream events go through SendEvent() before it. Responses get the request's id here.
//
// Threading: a Job is used by one thread at a time (the engine thread in nielsd; the submitting
// thread for a request refused at once). The sink itself may be called from any thread.

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/owner.h"
#include "common/status.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

// Who sent a request (common/owner.h): the peer uid from SO_PEERCRED on a Unix socket, or the
// API-key principal of a request on the HTTP TCP listener.
struct Caller {
  common::OwnerId owner = 0;
};

// Receives the responses of one request. Implementations must not block.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Delivers one response (request_id already set). `final` is true for the last one (a result or
  // an Error); stream TokenEvents come before it with final = false.
  // Returns false when the consumer is gone or too far behind (bounded buffer full).
  virtual bool Send(niels::v1::Response response, bool final) = 0;
};

class Job {
 public:
  // REQUIRES: cancel and sink not null.
  Job(Caller caller, niels::v1::Request request, std::shared_ptr<std::atomic<bool>> cancel,
      std::shared_ptr<ResponseSink> sink)
      : caller_(caller), request_(std::move(request)), cancel_(std::move(cancel)), sink_(std::move(sink)) {}
  Job(Job&&) = default;
  Job& operator=(Job&&) = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // The caller's identity: sessions, quotas and the prefix scope are its own.
  common::OwnerId owner() const { return caller_.owner; }
  const niels::v1::Request& request() const { return request_; }  // any kind except Cancel
  // Set by Cancel(request_id), a disconnect, or a refused stream event.
  const std::shared_ptr<std::atomic<bool>>& cancel() const { return cancel_; }
  // Set by a Cancel with keep_output: a generating request stops and keeps what it generated.
  // Never null (a flag nobody sets unless the front gives one).
  const std::shared_ptr<std::atomic<bool>>& stop() const { return stop_; }
  void set_stop(std::shared_ptr<std::atomic<bool>> stop) {
    if (stop != nullptr) stop_ = std::move(stop);
  }

  // Sends a non-final TokenEvent. When the sink refuses it (the client is gone or too far behind)
  // nothing more but the final response is offered, and the cancel flag is set, so whoever runs
  // the request stops it (nielsd's engine ends the turn within one iteration and restores the
  // session). Returns false once refused.
  bool SendEvent(niels::v1::TokenEvent event);
  // Sends the final response / the final error. Only the first final of either kind is sent.
  void Finish(niels::v1::Response response);
  void Fail(const common::Status& status);
  bool answered() const { return answered_; }

 private:
  Caller caller_;
  niels::v1::Request request_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<ResponseSink> sink_;
  bool sink_gone_ = false;
  bool answered_ = false;
};

}  // namespace niels::daemon::server
