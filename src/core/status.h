// Status and Expected<T>: user errors as values with a message that names what was wrong and what was
// expected. Programmer errors use MK_CHECK (abort with expression, file and line).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace mk {

// Concatenates its arguments with operator<< (error messages without a format library).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

struct Error {
  std::string message;
};

template <class... Args>
Error make_error(const Args&... args) {
  return Error{cat(args...)};
}

// A value or an Error. `if (!r) return r.error();` propagates.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Error e) : error_(std::move(e)) {}
  explicit operator bool() const { return value_.has_value(); }
  bool ok() const { return value_.has_value(); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  const Error& error() const { return error_; }
  const std::string& message() const { return error_.message; }

 private:
  std::optional<T> value_;
  Error error_;
};

// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e)), failed_(true) {}
  static Status ok_status() { return Status(); }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const Error& error() const { return error_; }
  const std::string& message() const { return error_.message; }

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace mk

#define MK_CHECK(cond)                                                                     \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);        \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// Propagates a failed Status or Expected from the enclosing function.
#define MK_TRY(expr)                          \
  do {                                                  \
    auto&& mk_try_result_ = (expr);                     \
    if (!mk_try_result_) return mk_try_result_.error(); \
  } while (0)
