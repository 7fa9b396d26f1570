#pragma once
// Status and Result<T>: how gpuslice reports expected failures (bad input, a device that
// refused, a job that does not fit). Exceptions are reserved for parsing edges; invariants
// assert. Both types are values and are thread-compatible (no shared state).

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpuslice {

// Stable codes: they appear in API error bodies and CLI exit codes, so never renumber.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // the caller's input is wrong (config, trace row, API body, flag)
  kNotFound = 2,
  kAlreadyExists = 3,
  kPermissionDenied = 4,
  kFailedPrecondition = 5,  // the system is not in a state that allows this (e.g. MIG with processes)
  kResourceExhausted = 6,   // does not fit now, or ever (see sched for which)
  kUnavailable = 7,         // an outside thing is absent (no NVIDIA driver, Slurm down)
  kUnsupported = 8,         // the device or driver cannot give this figure / do this
  kInternal = 9,
  kDataLoss = 10,
  kDeadlineExceeded = 11,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: queue 'x': key 'priority' ..." — for logs and CLI output.
  std::string ToString() const;

  // Prefixes context ("file.toml: ") to the message, keeping the code.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a T or a non-OK Status. Accessing value() of an error is an invariant violation.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T value_or(T fallback) const { return ok() ? std::get<T>(v_) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gpuslice

// Early-return helpers for code that propagates failures.
#define GPUSLICE_RETURN_IF_ERROR(expr)          \
  do {                                          \
    ::gpuslice::Status _st = (expr);            \
    if (!_st.ok()) return _st;                  \
  } while (0)

#define GPUSLICE_CONCAT_INNER(a, b) a##b
#define GPUSLICE_CONCAT(a, b) GPUSLICE_CONCAT_INNER(a, b)
#define GPUSLICE_ASSIGN_OR_RETURN(lhs, expr) \
  GPUSLICE_ASSIGN_OR_RETURN_IMPL(GPUSLICE_CONCAT(_res_, __LINE__), lhs, expr)
#define GPUSLICE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
