#include "client/daemon_client.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "common/wire_status.h"

namespace niels::client {

v1::Constraint JsonSchemaConstraint(std::string schema_json) {
  v1::Constraint constraint;
  constraint.set_json_schema(std::move(schema_json));
  return constraint;
}

v1::Constraint GbnfConstraint(std::string grammar) {
  v1::Constraint constraint;
  constraint.set_gbnf(std::move(grammar));
  return constraint;
}

v1::Constraint AnyJsonConstraint() {
  v1::Constraint constraint;
  constraint.mutable_any_json();
  return constraint;
}

namespace {

using boost::asio::local::stream_protocol;

// The result of a typed call: the final response's `get` field, or its error.
template <typename T>
StatusOr<T> Unwrap(StatusOr<v1::Response> response, v1::Response::KindCase expected,
                   const T& (v1::Response::*get)() const) {
  if (!response.ok()) return response.status();
  if (response->kind_case() == v1::Response::kError) return common::FromProto(response->error());
  if (response->kind_case() != expected) {
    return Status::Internal("nielsd answered request " + std::to_string(response->request_id()) +
                            " with response kind " + std::to_string(response->kind_case()) +
                            ", expected " + std::to_string(expected));
  }
  return ((*response).*get)();
}

}  // namespace

struct DaemonClient::Impl {
  boost::asio::io_context io;
  stream_protocol::socket socket{io};
};

DaemonClient::DaemonClient(std::string socket_path, size_t max_response_bytes)
    : socket_path_(std::move(socket_path)), impl_(std::make_unique<Impl>()),
      decoder_(max_response_bytes) {}

DaemonClient::~DaemonClient() {
  boost::system::error_code ignored;
  impl_->socket.close(ignored);
  for (int fd : cancel_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

StatusOr<std::unique_ptr<DaemonClient>> DaemonClient::Connect(const std::string& socket_path,
                                                              size_t max_response_bytes) {
  std::unique_ptr<DaemonClient> client(new DaemonClient(socket_path, max_response_bytes));
  if (::pipe2(client->cancel_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::Internal(std::string("pipe2: ") + std::strerror(errno));
  }
  boost::system::error_code ec;
  client->impl_->socket.connect(stream_protocol::endpoint(socket_path), ec);
  if (ec) return Status::Unavailable("cannot reach nielsd at " + socket_path + " (" + ec.message() + ")");
  return client;
}

void DaemonClient::RequestCancel() {
  const char byte = 'c';
  [[maybe_unused]] ssize_t n = ::write(cancel_pipe_[1], &byte, 1);  // full pipe: already pending
}

void DaemonClient::RequestStop() {
  const char byte = 's';
  [[maybe_unused]] ssize_t n = ::write(cancel_pipe_[1], &byte, 1);
}

void DaemonClient::ClearCancelRequest() { (void)TakeCancelRequest(); }

DaemonClient::CancelKind DaemonClient::TakeCancelRequest() {
  CancelKind kind = CancelKind::kNone;
  char buffer[64];
  ssize_t n = 0;
  while ((n = ::read(cancel_pipe_[0], buffer, sizeof(buffer))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] == 'c') {
        kind = CancelKind::kCancel;  // a cancel wins over a stop
      } else if (kind == CancelKind::kNone) {
        kind = CancelKind::kStop;
      }
    }
  }
  return kind;
}

Status DaemonClient::Broken(Status status) {
  broken_ = Status::Unavailable("connection to nielsd at " + socket_path_ + " is closed: " +
                                status.message());
  boost::system::error_code ignored;
  impl_->socket.close(ignored);
  return status;
}

Status DaemonClient::WriteRequest(const v1::Request& request) {
  const std::string frame = common::EncodeFrame(request);
  size_t written = 0;
  while (written < frame.size()) {
    boost::system::error_code ec;
    written += impl_->socket.write_some(
        boost::asio::buffer(frame.data() + written, frame.size() - written), ec);
    if (ec == boost::asio::error::interrupted) continue;
    if (ec) return Broken(Status::Unavailable("writing to nielsd at " + socket_path_ + ": " + ec.message()));
  }
  return Status::Ok();
}

Status DaemonClient::ReadResponse(v1::Response* response, CancelKind* cancel_requested) {
  *cancel_requested = CancelKind::kNone;
  while (true) {
    std::string payload;
    switch (decoder_.Next(&payload)) {
      case common::FrameDecoder::Result::kFrame: {
        Status parsed = common::ParseFrame(payload, response);
        if (!parsed.ok()) return Broken(Status::Internal("bad response from nielsd: " + parsed.message()));
        return Status::Ok();
      }
      case common::FrameDecoder::Result::kError:
        return Broken(Status::Internal("corrupt frame from nielsd: " + decoder_.error().message()));
      case common::FrameDecoder::Result::kNeedMore:
        break;
    }
    pollfd fds[2] = {{impl_->socket.native_handle(), POLLIN, 0}, {cancel_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Broken(Status::Unavailable(std::string("poll: ") + std::strerror(errno)));
    }
    if (fds[1].revents & POLLIN) {
      *cancel_requested = TakeCancelRequest();
      if (*cancel_requested != CancelKind::kNone) return Status::Ok();
      continue;
    }
    if (fds[0].revents == 0) continue;
    char buffer[16384];
    boost::system::error_code ec;
    const size_t n = impl_->socket.read_some(boost::asio::buffer(buffer), ec);
    if (ec == boost::asio::error::interrupted) continue;
    if (ec == boost::asio::error::eof) {
      return Broken(Status::Unavailable("nielsd at " + socket_path_ + " closed the connection"));
    }
    if (ec) return Broken(Status::Unavailable("reading from nielsd at " + socket_path_ + ": " + ec.message()));
    decoder_.Feed(std::string_view(buffer, n));
  }
}

StatusOr<v1::Response> DaemonClient::Call(v1::Request request, const TokenCallback& on_token) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (!broken_.ok()) return broken_;
  const uint64_t id = next_request_id_.fetch_add(1);
  request.set_request_id(id);
  NIELS_RETURN_IF_ERROR(WriteRequest(request));

  std::optional<v1::Response> final_response;
  uint64_t cancel_id = 0;  // the Cancel request we sent for `id`, if any
  bool cancel_answered = false;
  while (!final_response || (cancel_id != 0 && !cancel_answered)) {
    v1::Response response;
    CancelKind cancel_requested = CancelKind::kNone;
    NIELS_RETURN_IF_ERROR(ReadResponse(&response, &cancel_requested));
    if (cancel_requested != CancelKind::kNone) {
      if (cancel_id != 0 || final_response) continue;  // already cancelling, or already done
      cancel_id = next_request_id_.fetch_add(1);
      v1::Request cancel;
      cancel.set_request_id(cancel_id);
      cancel.mutable_cancel()->set_target_request_id(id);
      cancel.mutable_cancel()->set_keep_output(cancel_requested == CancelKind::kStop);
      NIELS_RETURN_IF_ERROR(WriteRequest(cancel));
      continue;
    }
    if (response.request_id() == id) {
      if (response.kind_case() != v1::Response::kToken) {
        final_response = std::move(response);
      } else if (on_token && !final_response) {
        on_token(response.token());
      }
    } else if (cancel_id != 0 && response.request_id() == cancel_id &&
               response.kind_case() != v1::Response::kToken) {
      cancel_answered = true;
    }
    // Anything else belongs to no call of ours (a stale id): ignored.
  }
  return *std::move(final_response);
}

StatusOr<v1::InfoResponse> DaemonClient::Info() {
  v1::Request r;
  r.mutable_info();
  return Unwrap(Call(std::move(r)), v1::Response::kInfo, &v1::Response::info);
}

StatusOr<v1::CreateSessionResponse> DaemonClient::CreateSession(
    const std::optional<std::string>& system_prompt) {
  return CreateSession(system_prompt, v1::ToolSet());
}

StatusOr<v1::CreateSessionResponse> DaemonClient::CreateSession(const std::optional<std::string>& system_prompt,
                                                                const v1::ToolSet& tools) {
  v1::Request r;
  auto* create = r.mutable_create_session();
  if (system_prompt) create->set_system_prompt(*system_prompt);
  if (tools.tools_size() > 0) *create->mutable_tools() = tools;
  return Unwrap(Call(std::move(r)), v1::Response::kCreateSession, &v1::Response::create_session);
}

StatusOr<v1::ChatResponse> DaemonClient::Chat(const v1::ChatRequest& request, const TokenCallback& on_token) {
  v1::Request r;
  *r.mutable_chat() = request;
  return Unwrap(Call(std::move(r), on_token), v1::Response::kChat, &v1::Response::chat);
}

StatusOr<v1::GenerateResponse> DaemonClient::Generate(const v1::GenerateRequest& request,
                                                      const TokenCallback& on_token) {
  v1::Request r;
  *r.mutable_generate() = request;
  return Unwrap(Call(std::move(r), on_token), v1::Response::kGenerate, &v1::Response::generate);
}

StatusOr<v1::TokenizeResponse> DaemonClient::Tokenize(const std::string& text, TokenizeOptions options) {
  v1::Request r;
  r.mutable_tokenize()->set_text(text);
  r.mutable_tokenize()->set_add_special(options.add_special);
  r.mutable_tokenize()->set_parse_special(options.parse_special);
  return Unwrap(Call(std::move(r)), v1::Response::kTokenize, &v1::Response::tokenize);
}

StatusOr<v1::DetokenizeResponse> DaemonClient::Detokenize(const std::vector<int32_t>& ids) {
  v1::Request r;
  r.mutable_detokenize()->mutable_ids()->Add(ids.begin(), ids.end());
  return Unwrap(Call(std::move(r)), v1::Response::kDetokenize, &v1::Response::detokenize);
}

StatusOr<v1::GetSessionResponse> DaemonClient::GetSession(const std::string& session_id) {
  v1::Request r;
  r.mutable_get_session()->set_session_id(session_id);
  return Unwrap(Call(std::move(r)), v1::Response::kGetSession, &v1::Response::get_session);
}

StatusOr<v1::ListSessionsResponse> DaemonClient::ListSessions() {
  v1::Request r;
  r.mutable_list_sessions();
  return Unwrap(Call(std::move(r)), v1::Response::kListSessions, &v1::Response::list_sessions);
}

StatusOr<v1::ForkSessionResponse> DaemonClient::ForkSession(const std::string& session_id) {
  v1::Request r;
  r.mutable_fork_session()->set_session_id(session_id);
  return Unwrap(Call(std::move(r)), v1::Response::kForkSession, &v1::Response::fork_session);
}

StatusOr<v1::ResetSessionResponse> DaemonClient::ResetSession(const std::string& session_id) {
  v1::Request r;
  r.mutable_reset_session()->set_session_id(session_id);
  return Unwrap(Call(std::move(r)), v1::Response::kResetSession, &v1::Response::reset_session);
}

StatusOr<v1::RewindSessionResponse> DaemonClient::RewindSession(const std::string& session_id, int32_t keep_messages) {
  v1::Request r;
  r.mutable_rewind_session()->set_session_id(session_id);
  r.mutable_rewind_session()->set_keep_messages(keep_messages);
  return Unwrap(Call(std::move(r)), v1::Response::kRewindSession, &v1::Response::rewind_session);
}

StatusOr<v1::DeleteSessionResponse> DaemonClient::DeleteSession(const std::string& session_id) {
  v1::Request r;
  r.mutable_delete_session()->set_session_id(session_id);
  return Unwrap(Call(std::move(r)), v1::Response::kDeleteSession, &v1::Response::delete_session);
}

StatusOr<v1::CancelResponse> DaemonClient::Cancel(uint64_t target_request_id) {
  v1::Request r;
  r.mutable_cancel()->set_target_request_id(target_request_id);
  return Unwrap(Call(std::move(r)), v1::Response::kCancel, &v1::Response::cancel);
}

StatusOr<v1::WeightStatsResponse> DaemonClient::WeightStats(const std::vector<std::string>& names, bool full) {
  v1::Request r;
  for (const std::string& name : names) r.mutable_weight_stats()->add_names(name);
  r.mutable_weight_stats()->set_full(full);
  return Unwrap(Call(std::move(r)), v1::Response::kWeightStats, &v1::Response::weight_stats);
}

StatusOr<v1::StatsResponse> DaemonClient::Stats() {
  v1::Request r;
  r.mutable_stats();
  return Unwrap(Call(std::move(r)), v1::Response::kStats, &v1::Response::stats);
}

}  // namespace niels::client
