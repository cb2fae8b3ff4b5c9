// CLI11 checks shared by shoal and shoald.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace shoal {

// Refuses a typed "" with `why`: for a file or an address it would otherwise silently mean the
// default (stdout, the default socket) or nothing.
inline CLI::Validator NonEmpty(const std::string& why = "empty") {
  return CLI::Validator([why](std::string& text) { return text.empty() ? why : std::string(); },
                        "TEXT");
}

}  // namespace shoal
