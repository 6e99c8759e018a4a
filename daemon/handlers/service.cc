#include "daemon/handlers/service.h"

#include <string>
#include <utility>

#include <fmt/format.h>

#include "daemon/handlers/method_table.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

namespace {

// Makes `work` start the method's generating handler with what its prepare step produced.
void SetStart(engine::Work& work, const std::shared_ptr<server::Job>& job, const Method* method, Prepared prepared) {
  work.start = [job, method, prepared = std::move(prepared)](engine::EngineState& state, const engine::Work& work) {
    return method->generating(state, work, *job, job->request(), prepared);
  };
}

}  // namespace

Service::Service(std::unique_ptr<engine::Engine> engine, ServiceOptions options)
    : engine_(std::move(engine)), options_(std::move(options)), compile_worker_(options_.compile) {
  // Before the first Submit: the engine's state is still this thread's to read.
  const engine::EngineState& state = engine_->state();
  prepare_context_.tool_call_family = state.tool_call_family;
  if (state.chat_format() != nullptr && state.chat_format()->reasoning_tags()) {
    prepare_context_.reasoning = *state.chat_format()->reasoning_tags();
  }
  // The engine owns the model until it is destroyed, after the compile worker has stopped.
  background_context_.model = &engine_->model();
  background_context_.weight_stats_cache = &weight_stats_cache_;
}

Service::~Service() { Shutdown(); }

void Service::Shutdown() {
  // Every compile is answered (or its request passed on) before the engine stops taking work, so
  // nothing held here is left unanswered.
  compile_worker_.Shutdown();
  engine_->Shutdown();
}

size_t Service::held_requests() const {
  std::lock_guard lock(order_mutex_);
  return held_;
}

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
  if (method->background != nullptr) {
    RunInBackground(std::move(job), method);
    return;
  }
  engine::Work work;
  work.owner = job->owner();
  work.session_id = method->session(request);
  work.cancel = job->cancel();
  work.stop = job->stop();
  work.request_bytes = request.ByteSizeLong();
  work.fail = [job](const Status& status) { job->Fail(status); };
  if (method->quick != nullptr) {
    work.quick = [job, method](engine::EngineState& state, const engine::Work&) -> Status {
      HandlerResult result = method->quick(state, *job, job->request());
      if (!result.ok()) return result.status();
      job->Finish(std::move(result).value());
      return Status::Ok();
    };
  } else if (method->compiles != nullptr && method->compiles(request)) {
    StartCompile(std::move(job), method, std::move(work));
    return;
  } else {
    // Nothing to compile (no constraint, any_json, or a malformed one): cheap, done right here.
    common::StatusOr<Prepared> prepared =
        method->prepare != nullptr ? method->prepare(request, prepare_context_, {}) : common::StatusOr<Prepared>(Prepared{});
    if (!prepared.ok()) {
      job->Fail(prepared.status());
      return;
    }
    SetStart(work, job, method, std::move(prepared).value());
  }
  Forward(std::move(work));
}

void Service::Forward(engine::Work work) {
  if (work.session_id.empty()) {
    engine_->Submit(std::move(work));
    return;
  }
  Status refused;
  {
    std::lock_guard lock(order_mutex_);
    auto it = pending_by_session_.find(work.session_id);
    if (it == pending_by_session_.end()) {
      // Under the lock, so that a compile on this session finishing meanwhile cannot overtake it.
      // (Engine::Submit only enqueues; a refusal answers through the sink, which never blocks.)
      engine_->Submit(std::move(work));
      return;
    }
    const engine::EngineOptions& limits = engine_->options();
    size_t& of_uid = held_per_uid_[work.owner];
    if (held_ >= limits.max_queue) {
      refused = Status::ResourceExhausted(fmt::format(
          "{} requests already wait for a constraint compile ahead of them on their session, the "
          "limit in all (--max-queue); try again later",
          held_));
    } else if (of_uid >= limits.max_queued_per_uid) {
      refused = Status::ResourceExhausted(fmt::format(
          "{} already has {} requests waiting for a constraint compile ahead of them on their "
          "session, the limit per user (--max-queued-per-uid); wait for some to finish",
          common::DescribeOwner(work.owner), of_uid));
    }
    if (refused.ok()) {
      ++of_uid;
      ++held_;
      auto pending = std::make_shared<Pending>();
      pending->work = std::move(work);
      pending->held = true;
      it->second.push_back(std::move(pending));
      return;
    }
    if (of_uid == 0) held_per_uid_.erase(work.owner);
  }
  work.fail(refused);
}

void Service::RunInBackground(std::shared_ptr<server::Job> job, const Method* method) {
  auto result = std::make_shared<HandlerResult>(Status::Cancelled("the request was cancelled"));
  CompileWorker::Task task;
  task.owner = job->owner();
  task.cancel = job->cancel();
  task.run = [this, job, method, result](const CompileWorker::Cancelled& cancelled) -> Status {
    if (options_.on_compile_start) options_.on_compile_start(*job);
    *result = method->background(background_context_, job->request(), cancelled);
    return result->status();
  };
  task.done = [job, result](const Status& status) {
    if (status.ok()) {
      job->Finish(std::move(*result).value());
    } else {
      job->Fail(status);
    }
  };
  const Status refused = compile_worker_.Submit(std::move(task));
  if (!refused.ok()) job->Fail(refused);
}

void Service::StartCompile(std::shared_ptr<server::Job> job, const Method* method, engine::Work work) {
  auto pending = std::make_shared<Pending>();
  pending->work = std::move(work);
  pending->compiling = true;
  const std::string& session = pending->work.session_id;
  if (!session.empty()) {
    // In the session's order from now on: later requests on it wait for this one.
    std::lock_guard lock(order_mutex_);
    pending_by_session_[session].push_back(pending);
  }
  CompileWorker::Task task;
  task.owner = pending->work.owner;
  task.cancel = pending->work.cancel;
  task.run = [this, job, method, pending](const CompileWorker::Cancelled& cancelled) -> Status {
    if (options_.on_compile_start) options_.on_compile_start(*job);
    common::StatusOr<Prepared> prepared = method->prepare(job->request(), prepare_context_, cancelled);
    const Status status = prepared.status();
    // Only this thread touches a compiling request's work (Compiled publishes it under the lock).
    if (prepared.ok()) SetStart(pending->work, job, method, std::move(prepared).value());
    return status;
  };
  task.done = [this, pending](const Status& status) { Compiled(pending, status); };
  const Status refused = compile_worker_.Submit(std::move(task));
  if (!refused.ok()) Compiled(pending, refused);
}

void Service::Compiled(const std::shared_ptr<Pending>& pending, const Status& outcome) {
  const std::string session = pending->work.session_id;  // a copy: the work may be handed on below
  if (session.empty()) {
    if (outcome.ok()) {
      engine_->Submit(std::move(pending->work));
    } else {
      pending->work.fail(outcome);
    }
    return;
  }
  {
    std::lock_guard lock(order_mutex_);
    pending->compiling = false;
    std::list<std::shared_ptr<Pending>>& order = pending_by_session_[session];
    // A request that failed never reaches the engine, so it leaves the order at once, wherever it is.
    if (!outcome.ok()) order.remove(pending);
    SubmitReadyHeadsLocked(session);
  }
  // Answered outside the lock (the answer goes to the client's sink).
  if (!outcome.ok()) pending->work.fail(outcome);
}

void Service::SubmitReadyHeadsLocked(const std::string& session) {
  auto it = pending_by_session_.find(session);
  if (it == pending_by_session_.end()) return;
  std::list<std::shared_ptr<Pending>>& order = it->second;
  while (!order.empty() && !order.front()->compiling) {
    std::shared_ptr<Pending> head = std::move(order.front());
    order.pop_front();
    if (head->held) {
      --held_;
      if (--held_per_uid_[head->work.owner] == 0) held_per_uid_.erase(head->work.owner);
    }
    engine_->Submit(std::move(head->work));
  }
  if (order.empty()) pending_by_session_.erase(it);
}

common::StatusOr<std::unique_ptr<Service>> MakeService(const std::filesystem::path& model_dir,
                                                       engine::EngineOptions engine_options,
                                                       ServiceOptions service_options) {
  common::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::MakeEngine(model_dir, std::move(engine_options));
  if (!engine.ok()) return engine.status();
  return std::make_unique<Service>(std::move(engine).value(), std::move(service_options));
}

}  // namespace niels::daemon::handlers
