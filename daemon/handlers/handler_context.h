#pragma once
// HandlerContext: one wire request while it is handled -- the Job the server made of it, and the
// way back to its client (stream events, exactly one final response). Owned by the Work the
// Service builds for the request (service.h), so it outlives the request's Turn.
//
// Threading: used on the engine thread, except Fail() for a request that the engine refused at once
// (on the submitting thread, before anything else touches the context).

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/defaults.h"
#include "common/status.h"
#include "daemon/server/request_service.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

// What the handlers report about the server side (Info).
struct ServiceOptions {
  uint64_t max_frame_bytes = common::kDefaultMaxFrameBytes;  // the server enforces it
};

class HandlerContext {
 public:
  HandlerContext(server::Job job, const ServiceOptions& options) : job_(std::move(job)), options_(options) {}
  HandlerContext(const HandlerContext&) = delete;
  HandlerContext& operator=(const HandlerContext&) = delete;

  uint32_t uid() const { return job_.caller.uid; }
  const niels::v1::Request& request() const { return job_.request; }
  const std::shared_ptr<std::atomic<bool>>& cancel() const { return job_.cancel; }
  const ServiceOptions& options() const { return options_; }

  // Sends a non-final TokenEvent. When the sink refuses it (the client is gone or too far behind)
  // nothing more is sent and the request's cancel flag is set, which ends its turn within one
  // iteration (the session is restored).
  void SendEvent(niels::v1::TokenEvent event);
  // Sends the final response (its request_id set here) / the final error. Only the first final of
  // either kind is sent.
  void Finish(niels::v1::Response response);
  void Fail(const common::Status& status);

 private:
  server::Job job_;
  const ServiceOptions& options_;
  bool sink_gone_ = false;
  bool answered_ = false;
};

}  // namespace niels::daemon::handlers
