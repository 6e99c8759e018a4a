#pragma once
// The method table: for every request kind, its handler, which session it names and whether it is
// quick (answered at once, between iterations, never waiting for a generation), generating (a Turn
// the scheduler runs over many iterations) or background (answered on the compile worker, never on
// the engine thread). The one place that switches on Request::kind_case.
// Pure data; any thread.

#include <string>

#include "daemon/handlers/handlers.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::daemon::handlers {

struct Method {
  const char* name;  // e.g. "Chat"
  // The session the request names ("" for none): the engine keeps requests on one session in order.
  const std::string& (*session)(const niels::v1::Request& request);
  // Exactly one of quick, generating and background is set; prepare and compiles only with
  // generating, and either may be null there (nothing to prepare: an empty Prepared; nothing to
  // compile).
  HandlerResult (*quick)(engine::EngineState& state, server::Job& job, const niels::v1::Request& request);
  engine::TurnResult (*generating)(engine::EngineState& state, const engine::Work& work, server::Job& job,
                                   const niels::v1::Request& request, const Prepared& prepared);
  // Runs before the request is queued (handlers.h, "Generating"): on the compile worker when
  // `compiles` says the request carries text to compile, else on the submitting thread.
  common::StatusOr<Prepared> (*prepare)(const niels::v1::Request& request, const PrepareContext& context,
                                        const CompileCancelled& cancelled);
  bool (*compiles)(const niels::v1::Request& request);
  // Runs on the compile worker (handlers.h, "Background") and answers the request itself; the
  // engine never sees it.
  HandlerResult (*background)(const BackgroundContext& context, const niels::v1::Request& request,
                              const CompileCancelled& cancelled);
};

// The entry for the request's kind; nullptr for an unset kind and for Cancel (handled by the
// server).
const Method* FindMethod(const niels::v1::Request& request);

}  // namespace niels::daemon::handlers
