#pragma once
// Service: nielsd's RequestService (daemon/server/request_service.h). It owns the Engine and turns
// every wire request into a Work for it (daemon/engine/work.h): the method table names the
// handler, the session the request names and whether it is quick or generating; the handler runs
// on the engine thread and answers through the request's server::Job, which the Work owns.
//
// A Chat or Generate whose constraint is client-supplied text (a JSON Schema or GBNF) is compiled
// first, on the CompileWorker (compile_worker.h: bounded, one compile per uid at a time,
// cancellable), never on the submitting IO thread nor the engine thread; Submit returns at once.
// Once compiled the request joins the engine's queue; a compile error (INVALID_ARGUMENT), a spent
// compile budget (RESOURCE_EXHAUSTED), a full compile queue or a cancel answers it instead.
//
// A background request (WeightStats: it reads only the immutable weights) runs on the same
// CompileWorker under the same bounds and is answered from there; it never reaches the engine.
//
// Per-session order is kept across the compile: a request naming a session on which an earlier
// request is still compiling is held here and joins the engine's queue right after the earlier one
// (or after its answer, if it failed), in submission order. Held requests are bounded like the
// engine's queue (EngineOptions::max_queue in all, max_queued_per_uid per uid; RESOURCE_EXHAUSTED
// beyond).
//
// Threading: Submit() and Shutdown() are thread-safe. Answers come from the engine thread, a
// compile worker thread, or the submitting thread for a request refused at once.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/owner.h"
#include "common/status.h"
#include "daemon/engine/engine.h"
#include "daemon/handlers/compile_worker.h"
#include "daemon/handlers/handlers.h"
#include "daemon/server/request_service.h"

namespace niels::daemon::handlers {

struct Method;  // method_table.h

struct ServiceOptions {
  CompileWorkerOptions compile;
  // Called on a compile worker thread as each compile starts (before the constraint is compiled)
  // and as each background request starts, with the request's Job. Empty in nielsd; tests hold a compile here to see what waits for it.
  std::function<void(const server::Job& job)> on_compile_start;
};

class Service final : public server::RequestService {
 public:
  explicit Service(std::unique_ptr<engine::Engine> engine, ServiceOptions options = {});
  ~Service() override;  // Shutdown()

  // Cancel or an unset/unknown kind are answered at once (INVALID_ARGUMENT / UNIMPLEMENTED);
  // a request with constraint text goes to the compile worker, then to the engine; a background
  // request goes to the compile worker alone; everything else goes to the engine (behind its
  // session's compiling requests, if any).
  void Submit(server::Job job) override;
  // Stops the compile worker (waiting compiles end CANCELLED, a running one stops at its next
  // check), then the engine.
  void Shutdown() override;

  engine::Engine& engine() { return *engine_; }
  const loaders::Model& model() const { return engine_->model(); }
  // The compile worker's counts (compiled, refused, cancelled, budget spent) for Stats.
  CompileWorker::Counts compile_counts() const { return compile_worker_.counts(); }
  // Requests held behind a compiling request on their session (not yet in the engine's queue).
  size_t held_requests() const;
  // The weight statistics computed so far (thread-safe).
  const WeightStatsCache& weight_stats_cache() const { return weight_stats_cache_; }

 private:
  PrepareContext prepare_context_;  // what prepare steps know of the model (set at construction)
  BackgroundContext background_context_;  // what background handlers read (set at construction)
  // A request on its way to the engine that must keep its place in its session's order: one whose
  // constraint is compiling, or one held behind such a request.
  struct Pending {
    engine::Work work;       // complete (start set) once compiled
    bool compiling = false;  // guarded by order_mutex_
    bool held = false;       // counted in held_ / held_per_uid_
  };
  // Hands `work` to the engine, or holds it behind its session's compiling requests.
  void Forward(engine::Work work);
  // Runs the method's background handler on the compile worker, which answers the request.
  void RunInBackground(std::shared_ptr<server::Job> job, const Method* method);
  // Queues the request's compile on the worker.
  void StartCompile(std::shared_ptr<server::Job> job, const Method* method, engine::Work work);
  // A compile ended: `outcome` OK (the work is complete) or the request's error. Passes every
  // request at the head of the session's order that no longer waits to the engine.
  void Compiled(const std::shared_ptr<Pending>& pending, const common::Status& outcome);
  // REQUIRES: order_mutex_ held.
  void SubmitReadyHeadsLocked(const std::string& session);

  std::unique_ptr<engine::Engine> engine_;
  const ServiceOptions options_;
  mutable std::mutex order_mutex_;
  // Guarded by order_mutex_: per session, its pending requests in submission order.
  std::unordered_map<std::string, std::list<std::shared_ptr<Pending>>> pending_by_session_;
  size_t held_ = 0;                         // guarded by order_mutex_
  std::map<common::OwnerId, size_t> held_per_uid_;  // guarded by order_mutex_
  WeightStatsCache weight_stats_cache_;
  CompileWorker compile_worker_;  // last: destroyed (its threads joined) before the rest
};

// Loads the model directory and starts an engine with the service on top. Errors are LoadModelDir's
// (they name the file and the key or tensor), so nielsd's main can print them as they are.
common::StatusOr<std::unique_ptr<Service>> MakeService(const std::filesystem::path& model_dir,
                                                       engine::EngineOptions engine_options,
                                                       ServiceOptions service_options = {});

}  // namespace niels::daemon::handlers
