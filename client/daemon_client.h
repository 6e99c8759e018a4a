#pragma once
// DaemonClient: a synchronous client for nielsd over its Unix socket (proto/PROTOCOL.md).
//
// One call at a time: each call assigns the next request id (1, 2, 3, ...), writes one Request
// frame and reads Response frames until the final response for that id arrives; stream events
// (TokenEvent) are handed to the caller's callback as they come. Wire errors become Status values
// through common::FromProto. After a transport failure (daemon gone, corrupt frame) every later
// call returns UNAVAILABLE.
//
// Cancellation: RequestCancel() may be called from any thread or from a signal handler (it only
// writes one byte to a self-pipe). The call in flight then sends Cancel{target_request_id} on the
// same connection, keeps reading until its own final response (normally Error CANCELLED, so the
// call returns CANCELLED) and also consumes the Cancel's reply, so the connection stays in step.
// A request made while no call is in flight stays pending until ClearCancelRequest() or the next
// call (which is then cancelled at once). RequestStop() works the same way with Cancel{keep_output}:
// the call then returns its normal result, stop_reason STOPPED, keeping what was generated.
//
// Threading: calls are serialized by a mutex; RequestCancel is async-signal-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/frame.h"
#include "common/status.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::client {

namespace v1 = ::niels::v1;
using common::Status;
using common::StatusOr;

// Structured output (proto/PROTOCOL.md, "Structured output"): constraints to set on
// ChatRequest.constraint or GenerateRequest.constraint, e.g.
//   *request.mutable_constraint() = JsonSchemaConstraint(schema_text);
v1::Constraint JsonSchemaConstraint(std::string schema_json);
v1::Constraint GbnfConstraint(std::string grammar);
v1::Constraint AnyJsonConstraint();

class DaemonClient {
 public:
  // Called for each stream event of the call in flight, on the calling thread.
  using TokenCallback = std::function<void(const v1::TokenEvent&)>;

  // Responses can be larger than requests (GetSession of a long session); default 64 MiB.
  static constexpr size_t kDefaultMaxResponseBytes = common::kMaxResponseBytes;

  // Connects to the daemon socket. UNAVAILABLE naming the path and the OS error when nothing
  // listens there ("cannot reach nielsd at PATH (No such file or directory)").
  static StatusOr<std::unique_ptr<DaemonClient>> Connect(
      const std::string& socket_path, size_t max_response_bytes = kDefaultMaxResponseBytes);

  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  StatusOr<v1::InfoResponse> Info();
  // `system_prompt` absent: no system message.
  StatusOr<v1::CreateSessionResponse> CreateSession(const std::optional<std::string>& system_prompt);
  // With `tools` (proto/PROTOCOL.md "Tools"): the session's tools, rendered at every turn.
  StatusOr<v1::CreateSessionResponse> CreateSession(const std::optional<std::string>& system_prompt,
                                                    const v1::ToolSet& tools);
  // Conversations and tools: request.messages (user, assistant with tool_calls, tool results with
  // tool_call_id), keep_messages, append_only, tools and tool_choice; the response's tool_calls are
  // the calls the reply made (stop_reason TOOL_CALLS), streamed as TokenEvent.tool_call.
  // With request.stream() set, each token is passed to `on_token` before the final response. With a
  // constraint, stop_reason CONSTRAINT_INCOMPLETE means max_new_tokens (or the context) cut the reply
  // before it was complete: it does not follow the constraint.
  StatusOr<v1::ChatResponse> Chat(const v1::ChatRequest& request, const TokenCallback& on_token = nullptr);
  StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                          const TokenCallback& on_token = nullptr);
  // The ids of `text`. TokenizeOptions::add_special puts the model's BOS in front when its tokenizer
  // adds one (InfoResponse.add_bos); parse_special reads special-token literals as their ids
  // (TokenizeRequest). By default neither: the ids of the text alone, literals as text.
  struct TokenizeOptions {
    bool add_special = false;
    bool parse_special = false;
  };
  StatusOr<v1::TokenizeResponse> Tokenize(const std::string& text, TokenizeOptions options);
  StatusOr<v1::TokenizeResponse> Tokenize(const std::string& text) { return Tokenize(text, TokenizeOptions{}); }
  StatusOr<v1::DetokenizeResponse> Detokenize(const std::vector<int32_t>& ids);
  StatusOr<v1::GetSessionResponse> GetSession(const std::string& session_id);
  StatusOr<v1::ListSessionsResponse> ListSessions();
  StatusOr<v1::ForkSessionResponse> ForkSession(const std::string& session_id);
  StatusOr<v1::ResetSessionResponse> ResetSession(const std::string& session_id);
  // Keeps the first keep_messages messages of the conversation (token-native sessions: even, whole
  // turns) and drops the rest.
  StatusOr<v1::RewindSessionResponse> RewindSession(const std::string& session_id, int32_t keep_messages);
  StatusOr<v1::DeleteSessionResponse> DeleteSession(const std::string& session_id);
  // An explicit Cancel as its own call (for requests in flight elsewhere on this connection).
  StatusOr<v1::CancelResponse> Cancel(uint64_t target_request_id);
  StatusOr<v1::StatsResponse> Stats();
  // The statistics of the tensors `names` select (Hugging Face or GGUF names, `*` matching any run
  // of characters; proto/PROTOCOL.md, "Weight statistics"): compact, or full with `full`.
  StatusOr<v1::WeightStatsResponse> WeightStats(const std::vector<std::string>& names, bool full = false);

  // The generic call behind all of the above: assigns request.request_id, sends it and returns the
  // final Response (which may carry an Error; the typed calls convert it). Transport failures
  // give UNAVAILABLE, a corrupt frame from the daemon INTERNAL.
  StatusOr<v1::Response> Call(v1::Request request, const TokenCallback& on_token = nullptr);

  // Asks the call in flight to be cancelled. Async-signal-safe, thread-safe.
  void RequestCancel();
  // Asks the call in flight to stop and keep what it generated (Cancel with keep_output): a Chat or
  // Generate then returns its result with stop_reason STOPPED. A pending RequestCancel wins.
  // Async-signal-safe, thread-safe.
  void RequestStop();
  // Forgets a cancel request that no call has acted on yet.
  void ClearCancelRequest();

  // The most recently assigned request id (a call's own, or the Cancel it sent); 0 before any.
  uint64_t last_request_id() const { return next_request_id_.load() - 1; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Impl;
  DaemonClient(std::string socket_path, size_t max_response_bytes);

  Status WriteRequest(const v1::Request& request);
  // Blocks until a frame or a cancel request arrives. *cancel_requested set when the latter.
  // What the self-pipe asks of the call in flight.
  enum class CancelKind { kNone, kCancel, kStop };
  // Empties the self-pipe: what its bytes asked for (kCancel when any asked to cancel).
  CancelKind TakeCancelRequest();
  Status ReadResponse(v1::Response* response, CancelKind* cancel_requested);
  Status Broken(Status status);

  std::string socket_path_;
  std::unique_ptr<Impl> impl_;
  common::FrameDecoder decoder_;
  std::atomic<uint64_t> next_request_id_{1};
  std::mutex call_mutex_;
  int cancel_pipe_[2] = {-1, -1};
  Status broken_;  // non-OK once the connection is unusable
};

}  // namespace niels::client
