#pragma once
// RequestChannel: one connection as the Dispatcher sees it -- its peer, the requests in flight on it
// with their cancel flags, and a way to answer. Connection implements it; the Dispatcher knows
// nothing else of a connection (and tests can hand it a fake).
//
// Threading: every method runs on the connection's strand (where the Dispatcher runs).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "daemon/server/job.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::server {

class RequestChannel {
 public:
  // A request now in flight: its cancel flag, and the sink for its responses (which stops
  // tracking it when the final response is queued).
  struct Tracked {
    std::shared_ptr<std::atomic<bool>> cancel;
    std::shared_ptr<std::atomic<bool>> stop;  // set by a Cancel with keep_output
    std::shared_ptr<ResponseSink> sink;
  };

  virtual ~RequestChannel() = default;
  // The peer's uid (SO_PEERCRED at accept time).
  virtual uint32_t peer_uid() const = 0;
  // Whether a request with this id is in flight (tracked and not yet answered).
  virtual bool InFlight(uint64_t request_id) const = 0;
  // Starts tracking `request_id`; nullopt when a request with that id is already in flight.
  virtual std::optional<Tracked> Track(uint64_t request_id) = 0;
  // Sets the cancel flag of an in-flight request (with keep_output its stop flag instead); false
  // when there is none or its final response has already been queued.
  virtual bool CancelRequest(uint64_t request_id, bool keep_output = false) = 0;
  // Queues a response that answers an untracked request (always accepted while open).
  virtual void SendNow(const niels::v1::Response& response) = 0;
};

// What a connection hands every decoded request to, on its strand (nielsd: Dispatcher::Dispatch,
// wired by the Daemon), so that a connection knows nothing of what handles requests.
using RequestHandler = std::function<void(RequestChannel& channel, niels::v1::Request request)>;

}  // namespace niels::daemon::server
