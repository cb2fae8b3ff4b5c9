// Pages over records that have a submission time and an id (experiments, sweeps), ordered by both.
// A token is the key of the last record of a page, so a page stays right when records are added
// or deleted between calls, and the next page starts at the token: a listing that follows every
// page reads each record once (the store seeks to the key; nothing before it is read again).
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "server/experiment_service.h"
#include "server/store.h"
#include "shared/status.h"

namespace shoal {

template <typename T>
std::string PageKey(const T& r) {
  return std::to_string(r.submitted_unix_ms()) + "." + r.id();
}

template <typename T>
RecordKey KeyOf(const T& r) {
  return {r.submitted_unix_ms(), r.id()};
}

// The key a token names; none for the first page.
inline StatusOr<std::optional<RecordKey>> ParsePageToken(const std::string& token) {
  if (token.empty()) return std::optional<RecordKey>();
  const size_t dot = token.find('.');
  char* end = nullptr;
  long long ms = -1;
  if (dot != std::string::npos) ms = std::strtoll(token.c_str(), &end, 10);
  if (dot == std::string::npos || end != token.c_str() + dot || ms < 0)
    return InvalidArgument("page_token: not a token from a previous page");
  return std::optional<RecordKey>(RecordKey{ms, token.substr(dot + 1)});
}

// One page from `fetch(after, n)`, which gives up to n records after a key in key order. `keep`
// says whether a record belongs in the listing (a filter): the records it refuses are read past,
// in chunks that double, until the page is full or the records end. The first chunk is one more
// than the page, so an unfiltered listing reads each record about once.
template <typename T, typename Fetch, typename Keep>
StatusOr<Page<T>> CollectPage(const PageRequest& req, Fetch fetch, Keep keep) {
  ASSIGN_OR_RETURN(std::optional<RecordKey> after, ParsePageToken(req.token));
  size_t chunk = size_t(req.size) + 1;
  Page<T> page;
  for (;; chunk = std::min<size_t>(chunk * 2, 4096)) {
    ASSIGN_OR_RETURN(std::vector<T> got, fetch(after, chunk));
    for (auto& r : got) {
      after = KeyOf(r);
      if (!keep(r)) continue;
      if (page.items.size() == req.size) {
        page.next = PageKey(page.items.back());
        return page;
      }
      page.items.push_back(std::move(r));
    }
    if (got.size() < chunk) return page;
  }
}

// A page of records held in memory (sweeps): sorted by key, then taken as the store would.
template <typename T>
StatusOr<Page<T>> TakePage(std::vector<T> all, const PageRequest& req) {
  std::sort(all.begin(), all.end(), [](const T& a, const T& b) { return KeyOf(a) < KeyOf(b); });
  auto fetch = [&](const std::optional<RecordKey>& after, size_t n) -> StatusOr<std::vector<T>> {
    auto it = all.begin();
    if (after)
      it = std::upper_bound(all.begin(), all.end(), *after,
                            [](const RecordKey& k, const T& r) { return k < KeyOf(r); });
    const size_t left = size_t(all.end() - it);
    return std::vector<T>(it, it + std::min(n, left));
  };
  return CollectPage<T>(req, fetch, [](const T&) { return true; });
}

}  // namespace shoal
