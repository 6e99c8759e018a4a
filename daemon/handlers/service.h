#pragma once
// Service: nielsd's RequestService (daemon/server/request_service.h). It owns the Engine and turns
// every wire request into a Work for it (daemon/engine/work.h): the method table names the
// handler, the session the request names and whether it is quick or generating; the handler runs
// on the engine thread and answers through the request's server::Job, which the Work owns.
//
// Threading: Submit() and Shutdown() are thread-safe (they only call the Engine's).

#include <filesystem>
#include <memory>

#include "common/status.h"
#include "daemon/engine/engine.h"
#include "daemon/server/request_service.h"

namespace niels::daemon::handlers {

class Service final : public server::RequestService {
 public:
  explicit Service(std::unique_ptr<engine::Engine> engine);
  ~Service() override;  // Shutdown()

  // Cancel or an unset/unknown kind are answered at once (INVALID_ARGUMENT / UNIMPLEMENTED);
  // everything else goes to the engine.
  void Submit(server::Job job) override;
  void Shutdown() override;

  engine::Engine& engine() { return *engine_; }
  const loaders::Model& model() const { return engine_->model(); }

 private:
  std::unique_ptr<engine::Engine> engine_;
};

// Loads the model directory and starts an engine with the service on top. Errors are LoadModelDir's
// (they name the file and the key or tensor), so nielsd's main can print them as they are.
common::StatusOr<std::unique_ptr<Service>> MakeService(const std::filesystem::path& model_dir,
                                                       engine::EngineOptions engine_options);

}  // namespace niels::daemon::handlers
