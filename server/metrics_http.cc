#include "server/metrics_http.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>

namespace shoal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class BeastMetricsServer final : public MetricsServer {
 public:
  BeastMetricsServer(const tcp::endpoint& at, Render render)
      : acceptor_(io_, at), render_(std::move(render)) {}
  ~BeastMetricsServer() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  int port() const override { return acceptor_.local_endpoint().port(); }

 private:
  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (ec) return;  // stopped
      Serve(std::move(sock));
      Accept();
    });
  }
  void Serve(tcp::socket sock) {
    timeval two_s{2, 0};  // a scraper that sends nothing does not hold the thread
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &two_s, sizeof two_s);
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &two_s, sizeof two_s);
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    const bool ok = req.method() == http::verb::get && req.target() == "/metrics";
    http::response<http::string_body> res{ok ? http::status::ok : http::status::not_found,
                                          req.version()};
    res.set(http::field::content_type,
            ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8");
    res.body() = ok ? render_() : "only GET /metrics is served here\n";
    res.keep_alive(false);
    res.prepare_payload();
    http::write(sock, res, ec);
    sock.shutdown(tcp::socket::shutdown_send, ec);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  Render render_;
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host_port,
                                                              Render render) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("--metrics-listen: want HOST:PORT");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  const unsigned long port = std::strtoul(host_port.c_str() + colon + 1, nullptr, 10);
  if (ec || port > 65535)
    return InvalidArgument("--metrics-listen: " + host_port + " is not an address and port");
  try {
    auto s = std::make_unique<BeastMetricsServer>(tcp::endpoint(addr, uint16_t(port)),
                                                  std::move(render));
    s->Run();
    return std::unique_ptr<MetricsServer>(std::move(s));
  } catch (const std::exception& e) {
    return Unavailable("--metrics-listen " + host_port + ": " + e.what());
  }
}

}  // namespace shoal
