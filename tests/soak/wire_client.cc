#include "tests/soak/wire_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace niels::soak {

using Clock = std::chrono::steady_clock;

bool IsConnectionRefusal(const niels::v1::Response& response) {
  return response.request_id() == 0 && response.has_error() &&
         response.error().code() == niels::v1::RESOURCE_EXHAUSTED;
}

bool WireClient::Connect(const std::string& path) {
  Close();
  decoder_ = common::FrameDecoder(64u << 20);
  bytes_read_ = 0;
  stopped_at_limit_ = false;
  eof_ = false;
  refused_ = false;
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    error_ = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    error_ = "connect " + path + ": " + std::strerror(errno);
    Close();
    return false;
  }
  return true;
}

void WireClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool WireClient::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = std::string("send: ") + std::strerror(errno);
      // A refused connection is closed by nielsd right after its refusal frame, the first and only
      // frame on it: read that.
      if (bytes_read_ == 0) {
        const std::string send_error = error_;
        (void)Read(std::chrono::milliseconds(200));
        if (!refused_) error_ = send_error;
      }
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::optional<niels::v1::Response> WireClient::Read(std::chrono::milliseconds timeout, uint64_t byte_limit) {
  const auto deadline = Clock::now() + timeout;
  std::string payload;
  for (;;) {
    const common::FrameDecoder::Result r = decoder_.Next(&payload);
    if (r == common::FrameDecoder::Result::kFrame) {
      niels::v1::Response response;
      if (!response.ParseFromString(payload)) {
        error_ = "unparsable response frame";
        return std::nullopt;
      }
      if (IsConnectionRefusal(response)) {
        refused_ = true;
        error_ = "refused: " + response.error().message();
        return std::nullopt;
      }
      return response;
    }
    if (r == common::FrameDecoder::Result::kError) {
      error_ = "corrupt response stream: " + decoder_.error().ToString();
      return std::nullopt;
    }
    if (bytes_read_ >= byte_limit) {
      stopped_at_limit_ = true;
      return std::nullopt;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      error_ = "timeout";
      return std::nullopt;
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends the loop
    char buffer[16384];
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof(buffer), byte_limit - bytes_read_));
    const ssize_t n = ::recv(fd_, buffer, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      error_ = n == 0 ? "EOF" : std::string("recv: ") + std::strerror(errno);
      return std::nullopt;
    }
    bytes_read_ += static_cast<uint64_t>(n);
    decoder_.Feed(std::string_view(buffer, static_cast<size_t>(n)));
  }
}

std::optional<niels::v1::Response> WireClient::ReadFinal(uint64_t request_id, std::chrono::milliseconds timeout,
                                                         std::string* streamed_text, bool* crossed) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<niels::v1::Response> response = Read(std::max(left, std::chrono::milliseconds(1)));
    if (!response) return std::nullopt;
    if (response->request_id() != request_id) {
      if (crossed) *crossed = true;
      continue;
    }
    if (response->has_token()) {
      if (streamed_text) *streamed_text += response->token().text();
      continue;
    }
    return response;
  }
}

}  // namespace niels::soak
