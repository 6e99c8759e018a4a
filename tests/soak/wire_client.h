#pragma once
// WireClient: a blocking nielsd client on a raw Unix socket for the soak and fault programs. It
// sends whole or partial frames, reads Response frames with a bounded wait, and counts the bytes
// it has read, so callers can disconnect at any byte boundary of a request or a response.
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

  // Writes all of `bytes` (MSG_NOSIGNAL). False when the peer is gone.
  bool Write(std::string_view bytes);
  bool Send(const niels::v1::Request& request) { return Write(common::EncodeFrame(request)); }

  // The next response, or nullopt on EOF, a corrupt stream, or no frame within `timeout`.
  // Stops early (nullopt, stopped_at_limit() true) once `byte_limit` bytes have been read in total.
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
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  common::FrameDecoder decoder_{64u << 20};
  uint64_t bytes_read_ = 0;
  bool stopped_at_limit_ = false;
  bool eof_ = false;
  std::string error_;
};

}  // namespace niels::soak
