// The --metrics-listen endpoint: GET /metrics answers the Prometheus text exposition, anything
// else 404. Boost.Beast over one Asio thread, every scrape asynchronous with a 2 s limit on its
// read and its write, so a stuck scraper delays neither the other scrapes nor the daemon.
// Unauthenticated, like every exporter: bind it to loopback or a monitoring network.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "shared/status.h"

namespace shoal {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // Listens on HOST:PORT (port 0: any free one; port() tells).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host_port,
                                                        Render render);
  virtual ~MetricsServer() = default;
  virtual int port() const = 0;
};

}  // namespace shoal
