#pragma once
// Shared helpers of the engine tests: a tiny real model directory, a recording ResponseSink, and
// blocking request helpers around Service::Submit (the wire-level entry of the engine).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/defaults.h"
#include "daemon/handlers/service.h"
#include "daemon/loaders/model_loader.h"
#include "niels/v1/nielsd.pb.h"
#include "tests/support/test_model.h"

namespace niels::daemon::handlers::testing {

namespace v1 = niels::v1;
using engine::EngineOptions;
using server::Caller;
using server::Job;
using server::ResponseSink;

// Records every response; Wait() blocks until the final one (or fails the test after a timeout).
class RecordingSink : public ResponseSink {
 public:
  // Called (on the engine thread) for each stream event before it is recorded; returning false makes
  // Send return false (a consumer that went away).
  std::function<bool(const v1::Response&)> on_event;

  bool Send(v1::Response response, bool final) override {
    std::unique_lock lock(mutex_);
    if (!final) {
      events_.push_back(response);
      if (on_event) {
        lock.unlock();
        return on_event(response);
      }
      return true;
    }
    ++finals_;
    final_ = std::move(response);
    done_.notify_all();
    return true;
  }

  v1::Response Wait() {
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, std::chrono::seconds(60), [this] { return finals_ > 0; })) {
      ADD_FAILURE() << "no final response within 60 s";
      return {};
    }
    return final_;
  }
  std::vector<v1::Response> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  int finals() {
    std::lock_guard lock(mutex_);
    return finals_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<v1::Response> events_;
  v1::Response final_;
  int finals_ = 0;
};

// Holds the engine thread in its first stream event until Open(), so that requests submitted
// meanwhile are admitted together and share every decode step.
struct GateSink : RecordingSink {
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false, open = false;
  GateSink() {
    on_event = [this](const v1::Response&) {
      std::unique_lock lock(mutex);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [this] { return open; });
      return true;
    };
  }
  void WaitEntered() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [this] { return entered; });
  }
  void Open() {
    std::lock_guard lock(mutex);
    open = true;
    cv.notify_all();
  }
};

// A sink that blocks the engine thread on its first event until released (to fill the queue).
struct BlockingSink : RecordingSink {
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false;
  bool released = false;
  BlockingSink() {
    on_event = [this](const v1::Response&) {
      std::unique_lock lock(mutex);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [this] { return released; });
      return true;
    };
  }
  void WaitEntered() {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [this] { return entered; }));
  }
  void Release() {
    std::lock_guard lock(mutex);
    released = true;
    cv.notify_all();
  }
};

inline constexpr uint32_t kUid = 1000;
inline constexpr uint32_t kOtherUid = 65534;

// Submits `request` as `uid` and returns the sink (not waited on).
inline std::shared_ptr<RecordingSink> SubmitAsync(server::RequestService& engine, v1::Request request, uint32_t uid = kUid,
                                                  std::shared_ptr<std::atomic<bool>> cancel = nullptr,
                                                  std::shared_ptr<RecordingSink> sink = nullptr) {
  static std::atomic<uint64_t> next_request_id{1};
  if (request.request_id() == 0) request.set_request_id(next_request_id++);
  if (!sink) sink = std::make_shared<RecordingSink>();
  if (!cancel) cancel = std::make_shared<std::atomic<bool>>(false);
  engine.Submit(Job{Caller{uid}, std::move(request), std::move(cancel), sink});
  return sink;
}

// Submits and waits for the final response.
inline v1::Response Call(server::RequestService& engine, const v1::Request& request, uint32_t uid = kUid) {
  return SubmitAsync(engine, request, uid)->Wait();
}

inline v1::ErrorCode ErrorOf(const v1::Response& response) {
  return response.has_error() ? response.error().code() : v1::ERROR_CODE_UNSPECIFIED;
}

// --- request builders ---

inline v1::Request CreateRequest(const std::string* system_prompt = nullptr) {
  v1::Request request;
  auto* create = request.mutable_create_session();
  if (system_prompt) create->set_system_prompt(*system_prompt);
  return request;
}

inline v1::Request ChatRequest(const std::string& session, const std::string& text, int max_new_tokens,
                               bool use_kv_cache = true, bool stream = false) {
  v1::Request request;
  auto* chat = request.mutable_chat();
  chat->set_session_id(session);
  chat->set_user_text(text);
  chat->set_max_new_tokens(max_new_tokens);
  chat->set_use_kv_cache(use_kv_cache);
  chat->set_stream(stream);
  chat->mutable_sampling()->set_temperature(0.0f);  // greedy unless a test changes it
  return request;
}

inline v1::Request GenerateRequest(const std::string& session, const std::vector<int32_t>& input, int max_new_tokens) {
  v1::Request request;
  auto* generate = request.mutable_generate();
  generate->set_session_id(session);
  generate->mutable_input_ids()->Add(input.begin(), input.end());
  generate->set_max_new_tokens(max_new_tokens);
  generate->mutable_sampling()->set_temperature(0.0f);
  return request;
}

inline v1::Request GetRequest(const std::string& session) {
  v1::Request request;
  request.mutable_get_session()->set_session_id(session);
  return request;
}

// The tiny model with a larger context, written once per process.
inline const std::filesystem::path& TinyModelDir(int64_t context) {
  static std::mutex mutex;
  static std::map<int64_t, std::unique_ptr<niels::testing::TempDir>> dirs;
  std::lock_guard lock(mutex);
  auto& dir = dirs[context];
  if (!dir) {
    dir = std::make_unique<niels::testing::TempDir>("niels_engine_test_");
    model::ModelConfig config = niels::testing::TinyConfig();
    config.context = context;
    niels::testing::WriteModelDir(dir->path(), config, /*seed=*/7);
  }
  return dir->path();
}

inline std::unique_ptr<Service> StartEngine(int64_t context, EngineOptions options = {},
                                            ServiceOptions service_options = {}) {
  auto engine = MakeService(TinyModelDir(context), std::move(options), std::move(service_options));
  if (!engine.ok()) throw std::runtime_error(engine.status().ToString());
  return std::move(engine).value();
}

// The model loaded independently of the engine (reference computations in tests).
inline std::unique_ptr<loaders::Model> LoadTinyModel(int64_t context) {
  auto model = loaders::LoadModel(TinyModelDir(context));
  if (!model.ok()) throw std::runtime_error(model.status().ToString());
  return std::move(model).value();
}

}  // namespace niels::daemon::handlers::testing
