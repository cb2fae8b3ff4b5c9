// What a typed number may look like, shared by the spec's parser and the CLI11 options' checks:
// strtoull and strtod take more than users mean (leading blanks, hex, "inf", "nan").
#pragma once

#include <cstdlib>
#include <string>

namespace shoal {

// Decimal digits only, at most 20 (uint64's width).
inline bool IsWholeNumberText(const std::string& t) {
  return !t.empty() && t.size() <= 20 && t.find_first_not_of("0123456789") == std::string::npos;
}

// A plain decimal ("0.1", "1e-3", "+2") that strtod reads whole; the value may still overflow.
inline bool IsPlainDecimalText(const std::string& t) {
  if (t.empty() || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  (void)std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

}  // namespace shoal
