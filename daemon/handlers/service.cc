#include "daemon/handlers/service.h"

#include <utility>

#include "daemon/handlers/method_table.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

Service::Service(std::unique_ptr<engine::Engine> engine) : engine_(std::move(engine)) {}

Service::~Service() { Shutdown(); }

void Service::Shutdown() { engine_->Shutdown(); }

void Service::Submit(server::Job submitted) {
  // Shared by the Work's callbacks; the Work (and, once admitted, the Turn owning it) keeps it alive
  // for as long as anything may answer through it.
  auto job = std::make_shared<server::Job>(std::move(submitted));
  const v1::Request& request = job->request();
  if (request.kind_case() == v1::Request::kCancel) {
    job->Fail(Status::InvalidArgument("Cancel is handled by the server, not the engine"));
    return;
  }
  const Method* method = FindMethod(request);
  if (method == nullptr) {
    job->Fail(Status::Unimplemented("unknown or empty request kind"));
    return;
  }
  engine::Work work;
  work.uid = job->uid();
  work.session_id = method->session(request);
  work.cancel = job->cancel();
  work.request_bytes = request.ByteSizeLong();
  work.fail = [job](const Status& status) { job->Fail(status); };
  if (method->quick != nullptr) {
    work.quick = [job, method](engine::EngineState& state, const engine::Work&) -> Status {
      HandlerResult result = method->quick(state, *job, job->request());
      if (!result.ok()) return result.status();
      job->Finish(std::move(result).value());
      return Status::Ok();
    };
  } else {
    // Before the queue, on this (the submitting) thread: e.g. the constraint's grammar is compiled.
    Prepared prepared;
    if (method->prepare != nullptr) {
      common::StatusOr<Prepared> done = method->prepare(request);
      if (!done.ok()) {
        job->Fail(done.status());
        return;
      }
      prepared = std::move(done).value();
    }
    work.start = [job, method, prepared = std::move(prepared)](engine::EngineState& state, const engine::Work& work) {
      return method->generating(state, work, *job, job->request(), prepared);
    };
  }
  engine_->Submit(std::move(work));
}

common::StatusOr<std::unique_ptr<Service>> MakeService(const std::filesystem::path& model_dir,
                                                       engine::EngineOptions engine_options) {
  common::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::MakeEngine(model_dir, std::move(engine_options));
  if (!engine.ok()) return engine.status();
  return std::make_unique<Service>(std::move(engine).value());
}

}  // namespace niels::daemon::handlers
