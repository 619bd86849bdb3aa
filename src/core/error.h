// Errors carry a kind that maps to an HTTP status, so every layer can throw and the
// server can answer with the right code without knowing where the error came from.
#pragma once

#include <stdexcept>
#include <string>

namespace hibana {

enum class ErrorKind {
  invalid_argument,  // the caller's input is wrong (400)
  not_found,         // a file, tensor, model or route does not exist (404)
  unsupported,       // well-formed but not something we implement (400)
  corrupt_data,      // a file's content contradicts itself (400 when user-supplied)
  io,                // the operating system refused (500)
  out_of_memory,     // an allocation failed (503)
  overloaded,        // too much work queued (429)
  cancelled,         // the client went away (499)
  timeout,           // a deadline passed (504)
  internal,          // a bug (500)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

int http_status(ErrorKind kind);
const char* error_kind_name(ErrorKind kind);

// Throws Error(kind, message) when cond is false. Cheap enough for hot-path argument checks.
inline void check(bool cond, ErrorKind kind, const std::string& message) {
  if (!cond) throw Error(kind, message);
}

}  // namespace hibana
