#include "daemon/handlers/service.h"

#include <utility>

#include "daemon/handlers/method_table.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

Service::Service(std::unique_ptr<engine::Engine> engine, ServiceOptions options)
    : options_(options), engine_(std::move(engine)) {}

Service::~Service() { Shutdown(); }

void Service::Shutdown() { engine_->Shutdown(); }

void Service::Submit(server::Job job) {
  auto context = std::make_shared<HandlerContext>(std::move(job), options_);
  const v1::Request& request = context->request();
  if (request.kind_case() == v1::Request::kCancel) {
    context->Fail(Status::InvalidArgument("Cancel is handled by the server, not the engine"));
    return;
  }
  const Method* method = FindMethod(request);
  if (method == nullptr) {
    context->Fail(Status::Unimplemented("unknown or empty request kind"));
    return;
  }
  engine::Work work;
  work.uid = context->uid();
  work.session_id = method->session(request);
  work.cancel = context->cancel();
  work.fail = [context](const Status& status) { context->Fail(status); };
  if (method->quick != nullptr) {
    work.quick = [context, method](engine::EngineState& state, const engine::WorkInfo&) -> Status {
      HandlerResult result = method->quick(state, *context, context->request());
      if (!result.ok()) return result.status();
      context->Finish(std::move(result).value());
      return Status::Ok();
    };
  } else {
    // The Turn's callbacks refer to *context: the Work (owning it) outlives the Turn.
    work.start = [context, method](engine::EngineState& state, const engine::WorkInfo& info) {
      return method->generating(state, info, *context, context->request());
    };
  }
  engine_->Submit(std::move(work));
}

common::StatusOr<std::unique_ptr<Service>> MakeService(const std::filesystem::path& model_dir,
                                                       engine::EngineOptions engine_options,
                                                       ServiceOptions service_options) {
  common::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::MakeEngine(model_dir, std::move(engine_options));
  if (!engine.ok()) return engine.status();
  return std::make_unique<Service>(std::move(engine).value(), service_options);
}

}  // namespace niels::daemon::handlers
