// Pages over records that have a submission time and an id (experiments, sweeps), ordered by both.
// A token is the key of the last record of a page, so a page stays right when records are added
// or deleted between calls.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "server/experiment_service.h"
#include "shared/status.h"

namespace shoal {

template <typename T>
std::string PageKey(const T& r) {
  return std::to_string(r.submitted_unix_ms()) + "." + r.id();
}

template <typename T>
StatusOr<Page<T>> TakePage(std::vector<T> all, const PageRequest& req) {
  long long after_ms = -1;
  std::string after_id;
  if (!req.token.empty()) {
    const size_t dot = req.token.find('.');
    char* end = nullptr;
    if (dot != std::string::npos) after_ms = std::strtoll(req.token.c_str(), &end, 10);
    if (dot == std::string::npos || end != req.token.c_str() + dot || after_ms < 0)
      return InvalidArgument("page_token: not a token from a previous page");
    after_id = req.token.substr(dot + 1);
  }
  auto key = [](const T& r) { return std::make_tuple(r.submitted_unix_ms(), r.id()); };
  std::sort(all.begin(), all.end(), [&](const T& a, const T& b) { return key(a) < key(b); });
  Page<T> page;
  for (auto& r : all) {
    if (!req.token.empty() && key(r) <= std::make_tuple(int64_t(after_ms), after_id)) continue;
    if (page.items.size() == req.size) {
      page.next = PageKey(page.items.back());
      break;
    }
    page.items.push_back(std::move(r));
  }
  return page;
}

}  // namespace shoal
