// CLI11 checks shared by shoal and shoald.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "shared/spec/number_text.h"

namespace shoal {

// Refuses a typed "" with `why`: for a file or an address it would otherwise silently mean the
// default (stdout, the default socket) or nothing.
inline CLI::Validator NonEmpty(const std::string& why = "empty") {
  return CLI::Validator([why](std::string& text) { return text.empty() ? why : std::string(); },
                        "TEXT");
}

// Decimal digits, no leading 0. CLI11 converts with strtoull(text, base 0): "010" would be 8,
// "0x100" 256, " 7" 7, and Range checks only what that made of the text.
inline CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) {
        const bool ok = IsWholeNumberText(text) && (text[0] != '0' || text.size() == 1);
        return ok ? std::string()
                  : "'" + text + "' is not a whole number (decimal digits, no leading 0)";
      },
      "UINT");
}

// A plain decimal number ("0.01", "5", "1e-3"): no space, hex or inf/nan (strtod takes all).
inline CLI::Validator DecimalNumber() {
  return CLI::Validator(
      [](std::string& text) {
        return IsPlainDecimalText(text) ? std::string()
                                        : "'" + text + "' is not a plain decimal number";
      },
      "NUMBER");
}

}  // namespace shoal
