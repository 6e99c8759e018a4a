#pragma once
// The method table: for every request kind, its handler, which session it names and whether it is
// quick (answered at once, between iterations, never waiting for generation) or generating (a Turn
// the scheduler runs over many iterations). The one place that switches on Request::kind_case; the
// scheduler (engine.cc) only reads this table. Internal to daemon/engine; pure data, any thread.

#include <string>

#include "daemon/engine/engine_state.h"
#include "daemon/engine/turn.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::engine {

struct Method {
  const char* name;  // e.g. "Chat"
  // The session the request names ("" for none). Requests naming a session run in submission order
  // with every other request on that session (a turn is atomic).
  const std::string& (*session)(const niels::v1::Request& request);
  // Exactly one of these is set: quick requests are answered by `quick`, generating ones start a
  // Turn through `generating`.
  HandlerResult (*quick)(EngineState& state, JobContext& job, const niels::v1::Request& request);
  TurnResult (*generating)(EngineState& state, JobContext& job, const niels::v1::Request& request);
};

// The entry for the request's kind; nullptr for an unset kind and for Cancel (handled by the
// server).
const Method* FindMethod(const niels::v1::Request& request);

}  // namespace niels::daemon::engine
