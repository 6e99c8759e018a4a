#pragma once
// WireClient: a blocking nielsd client on a raw Unix socket for the soak and fault programs. It
// sends whole or partial frames, reads Response frames with a bounded wait, and counts the bytes
// it has read, so callers can disconnect at any byte boundary of a request or a response.
//
// A connection nielsd refuses (over --max-connections or --max-connections-per-uid, or while nielsd
// is out of file descriptors) gets one Response{request_id: 0, error: RESOURCE_EXHAUSTED} and is
// closed before nielsd reads anything from it (proto/PROTOCOL.md, "Limits").
// Read() reports that frame as refused(), not as a response: whatever was sent on the
// connection did not take effect, and the caller may retry it later on a new connection.
//
// Not thread-safe; one per thread. Every wait is bounded; a failure is reported, never thrown.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/frame.h"
#include "niels/v1/nielsd.pb.h"

namespace niels::soak {

// Whether `response` is nielsd's refusal of a connection (request_id 0, RESOURCE_EXHAUSTED). The
// soak and fault programs never use request id 0 themselves.
bool IsConnectionRefusal(const niels::v1::Response& response);

class WireClient {
 public:
  WireClient() = default;
  ~WireClient() { Close(); }
  WireClient(const WireClient&) = delete;
  WireClient& operator=(const WireClient&) = delete;

  // Connects to `path` (closing any previous connection). False with errno-style text in error().
  bool Connect(const std::string& path);
  void Close();
  bool connected() const { return fd_ >= 0; }

  // Writes all of `bytes` (MSG_NOSIGNAL). False when the peer is gone; if nielsd refused the
  // connection before closing it, its refusal is read then (refused() true).
  bool Write(std::string_view bytes);
  bool Send(const niels::v1::Request& request) { return Write(common::EncodeFrame(request)); }

  // The next response, or nullopt on EOF, a corrupt stream, a refusal (refused() true), or no frame
  // within `timeout`. Stops early (nullopt, stopped_at_limit() true) once `byte_limit` bytes have
  // been read in total.
  std::optional<niels::v1::Response> Read(std::chrono::milliseconds timeout,
                                          uint64_t byte_limit = UINT64_MAX);
  // Reads until the final response of `request_id` (skipping and counting its TokenEvents into
  // *events; a response for another id is a protocol violation: *crossed is set). nullopt as Read.
  std::optional<niels::v1::Response> ReadFinal(uint64_t request_id, std::chrono::milliseconds timeout,
                                               std::string* streamed_text = nullptr,
                                               bool* crossed = nullptr);

  uint64_t bytes_read() const { return bytes_read_; }
  bool stopped_at_limit() const { return stopped_at_limit_; }
  bool eof() const { return eof_; }
  // Whether nielsd refused this connection (see above); error() then holds nielsd's message.
  bool refused() const { return refused_; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  common::FrameDecoder decoder_{64u << 20};
  uint64_t bytes_read_ = 0;
  bool stopped_at_limit_ = false;
  bool eof_ = false;
  bool refused_ = false;
  std::string error_;
};

}  // namespace niels::soak
