#include "core/error.h"

namespace hibana {

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return 400;
    case ErrorKind::not_found: return 404;
    case ErrorKind::unsupported: return 400;
    case ErrorKind::corrupt_data: return 400;
    case ErrorKind::io: return 500;
    case ErrorKind::out_of_memory: return 503;
    case ErrorKind::overloaded: return 429;
    case ErrorKind::cancelled: return 499;
    case ErrorKind::timeout: return 504;
    case ErrorKind::internal: return 500;
  }
  return 500;
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::not_found: return "not_found";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::corrupt_data: return "corrupt_data";
    case ErrorKind::io: return "io";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::overloaded: return "overloaded";
    case ErrorKind::cancelled: return "cancelled";
    case ErrorKind::timeout: return "timeout";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

}  // namespace hibana
