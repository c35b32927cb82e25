// kiln/status.h — errors as values at every public boundary.
//
// A Status is OK or carries a code and a message meant for the user ("node 'conv1' (Conv): weight
// must be 4-D, got rank 3"). Expected<T> is a T or a non-OK Status. Neither throws; a library call
// never aborts on user input. Internal invariants use assertions instead.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller passed something wrong (input shape, option)
  kInvalidModel,      // the model file is malformed or inconsistent
  kUnsupported,       // valid, but kiln cannot run it (yet)
  kNotFound,          // a file, input or output name does not exist
  kIoError,           // reading or writing a file failed
  kEngineMismatch,    // engine built for another device, format or version
  kRuntimeError,      // failure while running (device error, out of memory)
  kInternal,          // a bug in kiln
  kCancelled,         // the run was stopped (ExecutionContext::terminate, or its time limit)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidModel: node 'x' (Conv): ..." — what CLI and Python show.
  std::string to_string() const;
  // Returns a copy whose message is prefixed by `context: `.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status invalid_model(std::string m) { return {StatusCode::kInvalidModel, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status runtime_error(std::string m) { return {StatusCode::kRuntimeError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}                          // NOLINT
  Expected(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

// Propagate a non-OK Status to the caller.
#define KILN_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::kiln::Status _kiln_st = (expr);              \
    if (!_kiln_st.ok()) return _kiln_st;           \
  } while (0)

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// `KILN_ASSIGN_OR_RETURN(auto x, f());` — unwraps an Expected or returns its Status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(_kiln_exp_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
