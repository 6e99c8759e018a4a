#pragma once
// The Service the request-level fuzz targets drive (request, connection): the real handlers and
// engine on a tiny random-weight model with a 32-token context -- every context limit (a turn that
// does not fit, a full context, old turns dropped to make room) is reached in a few tokens, and an
// uncached request, which runs the whole sequence again per sampled token, costs a quarter of what
// it would at 64 -- one engine thread, at most 16 sessions and 64 queued requests.
//
// The model directory is removed before this returns (the weights stay mapped, the rest is
// loaded), so a campaign stopped by a signal, which libFuzzer ends without destructors, leaves no
// directory behind. Aborts (a fuzz setup failure) when the service cannot start.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "daemon/handlers/service.h"
#include "tests/support/test_model.h"

namespace niels::fuzzing {

inline std::unique_ptr<daemon::handlers::Service> MakeTinyFuzzService(const std::string& target) {
  const niels::testing::TempDir dir("niels_" + target + "_fuzz_");
  daemon::model::ModelConfig config = niels::testing::TinyConfig();
  config.context = 32;
  niels::testing::WriteModelDir(dir.path(), config, 7);
  daemon::engine::EngineOptions options;
  options.threads = 1;
  options.session_limits.max_sessions = 16;
  options.max_queue = 64;
  auto made = daemon::handlers::MakeService(dir.path(), options);
  if (!made.ok()) {
    std::fprintf(stderr, "%s_fuzz: %s\n", target.c_str(), made.status().ToString().c_str());
    std::abort();
  }
  return std::move(made).value();
}

}  // namespace niels::fuzzing
