// The kvtier.Error exception hierarchy of the Python module: one subclass
// per StatusCode (kvtier.NotFound, kvtier.Corruption, kvtier.InvalidArgument
// (also a ValueError), kvtier.ResourceExhausted, kvtier.IOError,
// kvtier.Unavailable, kvtier.FailedPrecondition, kvtier.Internal).
//
// Binding code reports a failed Status by throwing StatusError (ThrowIfError,
// ValueOrThrow); the translator registered by RegisterErrors() turns it into
// the matching Python exception with the status message.
//
// Thread safety: the classes are created once at import; throwing needs no
// lock, translating runs with the GIL held.
#ifndef KVTIER_PYTHON_ERRORS_H_
#define KVTIER_PYTHON_ERRORS_H_

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "kvtier/status.h"

namespace kvtier::python {

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

[[noreturn]] inline void Throw(Status status) { throw StatusError(std::move(status)); }
[[noreturn]] inline void ThrowInvalid(std::string message) {
  throw StatusError(Status::InvalidArgument(std::move(message)));
}

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Creates the exception classes in `m` and registers the translator.
void RegisterErrors(pybind11::module_& m);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_ERRORS_H_
