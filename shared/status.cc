#include "shared/status.h"

namespace shoal {

std::string Status::ToString() const {
  static const char* kNames[] = {
      "OK",       "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
      "INTERNAL", "UNAVAILABLE",      "DATA_LOSS", "PERMISSION_DENIED",   "UNAUTHENTICATED"};
  return std::string(kNames[static_cast<int>(code_)]) + ": " + message_;
}

}  // namespace shoal
