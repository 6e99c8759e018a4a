#pragma once
// FakeService: a RequestService with scripted behaviour for the server tests. Each job runs on its
// own thread (so a stalled stream cannot hold up other jobs), and the fake records how each job
// ended so tests can check that cancel flags and refused sinks reach the engine.
//
// Scripts by request kind:
//   Info:  InfoResponse{model_name "fake", daemon_version "uid=<caller uid>"}.
//   Stats: StatsResponse{sessions 7} (the server fills in `connections`).
//   Chat:  max_new_tokens tokens (default 3); token i has text "t<i>" padded with '.' to
//          user_text.size() bytes when user_text is longer. With stream, one TokenEvent each, and
//          the fake waits `token_gap` between tokens. Final ChatResponse{reply = all texts,
//          reply_ids = 0..n-1}, or Error CANCELLED when the cancel flag was seen or Send refused.
//   anything else: Error UNIMPLEMENTED.
// With throw_on_stats, Submit() throws for a Stats request (an exception escaping into the server).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "daemon/server/request_service.h"

namespace niels::daemon::server::testing {

enum class Outcome { kCompleted, kCancelled, kRefused };

class FakeService : public RequestService {
 public:
  std::chrono::microseconds token_gap{200};
  bool throw_on_stats = false;

  ~FakeService() override { Shutdown(); }

  void Submit(Job job) override {
    if (throw_on_stats && job.request().has_stats()) throw std::runtime_error("fake engine failure");
    std::lock_guard lock(mutex_);
    submitted_.push_back(job.request());
    callers_.push_back(job.owner());
    if (shut_down_) {
      job.Fail(common::Status::Unavailable("shut down"));
      return;
    }
    cancels_.push_back(job.cancel());
    threads_.emplace_back([this, job = std::move(job)]() mutable { Run(job); });
  }

  void Shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      shut_down_ = true;
      for (auto& cancel : cancels_) cancel->store(true);
      threads.swap(threads_);
    }
    for (auto& thread : threads) thread.join();
  }

  // Waits (bounded) until the request with this id has ended; returns false on timeout.
  bool WaitForOutcome(uint64_t request_id, Outcome* outcome,
                      std::chrono::seconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    bool done = cv_.wait_for(lock, timeout, [&] { return outcomes_.count(request_id) > 0; });
    if (done) *outcome = outcomes_[request_id];
    return done;
  }

  std::vector<niels::v1::Request> submitted() {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  std::vector<common::OwnerId> callers() {
    std::lock_guard lock(mutex_);
    return callers_;
  }

 private:
  void Finish(uint64_t id, Outcome outcome) {
    {
      std::lock_guard lock(mutex_);
      outcomes_[id] = outcome;
    }
    cv_.notify_all();
  }

  void Run(Job& job) {
    const niels::v1::Request& request = job.request();
    niels::v1::Response response;
    response.set_request_id(request.request_id());
    if (request.has_info()) {
      response.mutable_info()->set_model_name("fake");
      response.mutable_info()->set_daemon_version("uid=" + std::to_string(job.owner()));
    } else if (request.has_stats()) {
      response.mutable_stats()->set_sessions(7);
    } else if (request.has_chat()) {
      RunChat(job);
      return;
    } else {
      response.mutable_error()->set_code(niels::v1::UNIMPLEMENTED);
    }
    job.Finish(response);
    Finish(request.request_id(), Outcome::kCompleted);
  }

  void RunChat(Job& job) {
    const niels::v1::ChatRequest& chat = job.request().chat();
    const int tokens = chat.has_max_new_tokens() ? chat.max_new_tokens() : 3;
    niels::v1::Response final_response;
    final_response.set_request_id(job.request().request_id());
    Outcome outcome = Outcome::kCompleted;
    for (int i = 0; i < tokens; ++i) {
      if (job.cancel()->load()) {
        outcome = Outcome::kCancelled;
        break;
      }
      std::string text = fmt::format("t{}", i);
      if (chat.user_text().size() > text.size()) text.resize(chat.user_text().size(), '.');
      final_response.mutable_chat()->mutable_reply()->append(text);
      final_response.mutable_chat()->add_reply_ids(i);
      if (chat.stream()) {
        niels::v1::TokenEvent event;
        event.set_id(i);
        event.set_index(i);
        event.set_text(text);
        if (!job.SendEvent(event)) {
          outcome = Outcome::kRefused;
          break;
        }
        std::this_thread::sleep_for(token_gap);
      }
    }
    if (outcome != Outcome::kCompleted) {
      final_response.mutable_error()->set_code(niels::v1::CANCELLED);
      final_response.mutable_error()->set_message("cancelled");
    }
    job.Finish(final_response);
    Finish(job.request().request_id(), outcome);
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  bool shut_down_ = false;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<std::atomic<bool>>> cancels_;
  std::vector<niels::v1::Request> submitted_;
  std::vector<common::OwnerId> callers_;
  std::map<uint64_t, Outcome> outcomes_;
};

}  // namespace niels::daemon::server::testing
