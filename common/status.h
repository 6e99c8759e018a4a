#pragma once
// Status and StatusOr<T>: how errors cross module boundaries in nielsd and niels-chat.
//
// A Status is a small value: a code from a closed set that mirrors the wire codes of
// proto/niels/v1 (niels.v1.ErrorCode) and a human-readable message. Success carries no message.
// Code never throws across a module boundary: adapters (model loader, connection, client)
// catch library exceptions (c10::Error, boost::system::system_error, ...) and convert them here.
// Mapping to and from the wire happens in exactly one place each way (common/wire_status.h).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace niels::common {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller sent something malformed or out of range
  kNotFound,           // unknown session, file, request id ...
  kPermissionDenied,   // another uid owns the session
  kResourceExhausted,  // limits: frame size, sessions, KV budget, queue depth
  kCancelled,          // the request was cancelled (Cancel or disconnect)
  kUnavailable,        // the daemon is not reachable or is shutting down
  kUnimplemented,      // a request type this daemon does not know
  kInternal,           // a bug or an unexpected library failure
};

// "INVALID_ARGUMENT", "NOT_FOUND", ... (the proto enum names without prefix).
std::string_view StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "NOT_FOUND: unknown session 1f2e...".
  std::string ToString() const;

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status. REQUIRES: value() only when ok().
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace niels::common

// Early return of a non-OK Status from a function returning Status or StatusOr.
#define NIELS_RETURN_IF_ERROR(expr)                         \
  do {                                                      \
    ::niels::common::Status niels_status_ = (expr);         \
    if (!niels_status_.ok()) return niels_status_;          \
  } while (0)
