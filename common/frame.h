#pragma once
// Framing of the nielsd protocol (proto/PROTOCOL.md): each message is a protobuf Request or
// Response preceded by its byte length as a base-128 varint (protobuf's delimited format).
//
// FrameDecoder is a pure incremental parser with no I/O: feed it bytes as they arrive and pull
// complete frames out. It never allocates more than max_frame_bytes for a frame, and reports an
// oversized length as soon as the varint is complete. Not thread-safe; one per connection.
// EncodeFrame uses protobuf's SerializeDelimitedToZeroCopyStream; decoding cannot use its
// ParseDelimitedFrom*: they read from a blocking stream and cannot answer "need more bytes" for a
// partial frame without consuming it, and CodedInputStream::ReadVarint32 cannot tell an incomplete
// varint from a malformed one, which the incremental Asio reader must distinguish.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <google/protobuf/message_lite.h>

#include "common/defaults.h"  // kDefaultMaxFrameBytes, kMaxResponseBytes
#include "common/status.h"

namespace niels::common {


// Serializes `message` as one delimited frame (varint length + bytes). A message that protobuf cannot
// serialize (over 2 GiB) yields an empty string: check the size first (ByteSizeLong()).
std::string EncodeFrame(const google::protobuf::MessageLite& message);

class FrameDecoder {
 public:
  enum class Result {
    kNeedMore,  // no complete frame buffered yet
    kFrame,     // a frame was produced
    kError,     // the stream is corrupt (malformed varint, oversized length); close the connection
  };

  explicit FrameDecoder(size_t max_frame_bytes = kDefaultMaxFrameBytes);

  // Appends received bytes. After kError further input is ignored.
  void Feed(std::string_view bytes);
  // Extracts the next complete frame payload into *payload (without the length prefix).
  // On kError, error() says why (RESOURCE_EXHAUSTED for oversize, INVALID_ARGUMENT for a bad varint).
  Result Next(std::string* payload);
  // Call at EOF: OK if no partial frame is buffered, else INVALID_ARGUMENT "truncated frame ...".
  Status Finish() const;

  const Status& error() const { return error_; }
  size_t buffered_bytes() const { return buffer_.size() - offset_; }

 private:
  size_t max_frame_bytes_;
  std::string buffer_;
  size_t offset_ = 0;  // start of unconsumed bytes in buffer_
  Status error_;
};

// Parses a frame payload into `message`. INVALID_ARGUMENT when the bytes are not a valid message.
Status ParseFrame(std::string_view payload, google::protobuf::MessageLite* message);

}  // namespace niels::common
