#include "common/wire_status.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace niels::common {
namespace {

// The pairs as the proto and status.h define them, written out independently of wire_status.cc.
const std::vector<std::pair<StatusCode, niels::v1::ErrorCode>>& CodePairs() {
  static const auto* pairs = new std::vector<std::pair<StatusCode, niels::v1::ErrorCode>>{
      {StatusCode::kInvalidArgument, niels::v1::INVALID_ARGUMENT},
      {StatusCode::kNotFound, niels::v1::NOT_FOUND},
      {StatusCode::kPermissionDenied, niels::v1::PERMISSION_DENIED},
      {StatusCode::kResourceExhausted, niels::v1::RESOURCE_EXHAUSTED},
      {StatusCode::kCancelled, niels::v1::CANCELLED},
      {StatusCode::kUnavailable, niels::v1::UNAVAILABLE},
      {StatusCode::kUnimplemented, niels::v1::UNIMPLEMENTED},
      {StatusCode::kInternal, niels::v1::INTERNAL},
  };
  return *pairs;
}

TEST(WireStatusTest, EveryCodeMapsBothWays) {
  for (const auto& [code, wire] : CodePairs()) {
    const Status status(code, "message for " + std::string(StatusCodeName(code)));
    const niels::v1::Error error = ToProto(status);
    EXPECT_EQ(error.code(), wire) << StatusCodeName(code);
    EXPECT_EQ(error.message(), status.message());
    // The wire enum name equals the status code name (PROTOCOL.md's table relies on it).
    EXPECT_EQ(niels::v1::ErrorCode_Name(wire), StatusCodeName(code));
    EXPECT_EQ(FromProto(error), status);
  }
}

TEST(WireStatusTest, SurvivesSerialization) {
  niels::v1::Response response;
  response.set_request_id(9);
  *response.mutable_error() = ToProto(Status::PermissionDenied("session owned by uid 1000"));
  niels::v1::Response parsed;
  ASSERT_TRUE(parsed.ParseFromString(response.SerializeAsString()));
  EXPECT_EQ(FromProto(parsed.error()), Status::PermissionDenied("session owned by uid 1000"));
}

TEST(WireStatusTest, UnspecifiedOrUnknownCodeIsInternalNeverOk) {
  niels::v1::Error unspecified;
  unspecified.set_message("oops");
  Status s = FromProto(unspecified);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("oops"), std::string::npos);

  // A code from a newer daemon arrives as an unknown enum value (proto3 open enums).
  niels::v1::Response response;
  ASSERT_TRUE(response.ParseFromString(std::string("\x12\x02\x08\x63", 4)));  // error{code: 99}
  Status unknown = FromProto(response.error());
  EXPECT_EQ(unknown.code(), StatusCode::kInternal);
  EXPECT_NE(unknown.message().find("99"), std::string::npos) << unknown.message();
}

TEST(WireStatusTest, OkStatusHasNoWireCode) {
  EXPECT_EQ(ToProto(Status::Ok()).code(), niels::v1::ERROR_CODE_UNSPECIFIED);
  EXPECT_EQ(ToProtoCode(StatusCode::kOk), niels::v1::ERROR_CODE_UNSPECIFIED);
}

}  // namespace
}  // namespace niels::common
