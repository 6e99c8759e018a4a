#include "common/frame.h"

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

namespace niels::common {
namespace {

// A length prefix is a uint32 varint: at most 5 bytes, and the 5th carries only 4 value bits.
constexpr size_t kMaxVarintBytes = 5;

enum class VarintResult { kIncomplete, kOk, kMalformed };

// Decodes the varint at the start of `bytes`. On kOk sets *value and *consumed.
VarintResult DecodeVarint32(std::string_view bytes, uint32_t* value, size_t* consumed) {
  uint64_t result = 0;
  for (size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (i == bytes.size()) return VarintResult::kIncomplete;
    const auto byte = static_cast<uint8_t>(bytes[i]);
    if (i == kMaxVarintBytes - 1 && byte > 0x0F) return VarintResult::kMalformed;  // > 32 bits
    result |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) {
      *value = static_cast<uint32_t>(result);
      *consumed = i + 1;
      return VarintResult::kOk;
    }
  }
  return VarintResult::kMalformed;  // a 6th byte would be needed
}

}  // namespace

std::string EncodeFrame(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::util::SerializeDelimitedToZeroCopyStream(message, &stream);
  }  // the stream trims `out` to the bytes written when destroyed
  return out;
}

FrameDecoder::FrameDecoder(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

void FrameDecoder::Feed(std::string_view bytes) {
  if (!error_.ok()) return;
  // Drop consumed bytes before growing, so the buffer holds at most one partial frame plus input.
  if (offset_ > 0 && offset_ * 2 >= buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(bytes);
}

FrameDecoder::Result FrameDecoder::Next(std::string* payload) {
  if (!error_.ok()) return Result::kError;
  const std::string_view pending(buffer_.data() + offset_, buffer_.size() - offset_);
  uint32_t length = 0;
  size_t prefix = 0;
  switch (DecodeVarint32(pending, &length, &prefix)) {
    case VarintResult::kIncomplete:
      return Result::kNeedMore;
    case VarintResult::kMalformed:
      error_ = Status::InvalidArgument("malformed frame length: varint longer than 32 bits");
      break;
    case VarintResult::kOk:
      if (length > max_frame_bytes_) {
        error_ = Status::ResourceExhausted("frame of " + std::to_string(length) +
                                           " bytes exceeds the maximum of " +
                                           std::to_string(max_frame_bytes_));
      }
      break;
  }
  if (!error_.ok()) {
    buffer_.clear();
    buffer_.shrink_to_fit();
    offset_ = 0;
    return Result::kError;
  }
  if (pending.size() - prefix < length) return Result::kNeedMore;
  payload->assign(pending.substr(prefix, length));
  offset_ += prefix + length;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return Result::kFrame;
}

Status FrameDecoder::Finish() const {
  if (!error_.ok()) return error_;
  if (buffered_bytes() == 0) return Status::Ok();
  return Status::InvalidArgument("truncated frame at end of stream: " +
                                 std::to_string(buffered_bytes()) + " bytes of a partial frame");
}

Status ParseFrame(std::string_view payload, google::protobuf::MessageLite* message) {
  if (!message->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::InvalidArgument("frame of " + std::to_string(payload.size()) +
                                   " bytes is not a valid " + message->GetTypeName());
  }
  return Status::Ok();
}

}  // namespace niels::common
