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

// Digits only. CLI11 converts with strtoull(text, base 0): "010" would be 8, "0x100" 256, " 7" 7,
// and Range checks only what that made of the text.
inline CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == text.npos &&
                            (text[0] != '0' || text.size() == 1);  // "010" would be octal
        return digits ? std::string()
                      : "'" + text + "' is not a whole number (decimal digits, no leading 0)";
      },
      "UINT");
}

// A plain decimal number ("0.01", "5", "1e-3"): no sign, space, hex or inf/nan (strtod takes all).
inline CLI::Validator DecimalNumber() {
  return CLI::Validator(
      [](std::string& text) {
        size_t i = 0, digits = 0;
        auto run = [&] {
          size_t n = 0;
          while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++n;
          return n;
        };
        digits += run();
        if (i < text.size() && text[i] == '.') ++i, digits += run();
        bool ok = digits > 0;
        if (ok && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
          ++i;
          if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
          ok = run() > 0;
        }
        return ok && i == text.size() ? std::string()
                                      : "'" + text + "' is not a plain decimal number";
      },
      "NUMBER");
}

}  // namespace shoal
