#include "server/metrics_http.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <thread>

namespace shoal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One scrape: read the request and write the answer, each within 2 s, asynchronously, so a
// scraper that sends nothing (or half a request, or drops off the network) holds neither the
// other scrapes nor the daemon's shutdown. (A blocking read with SO_RCVTIMEO does not do it:
// Asio waits again, without a limit, when the timeout fires on a blocking socket.)
class Scrape : public std::enable_shared_from_this<Scrape> {
 public:
  Scrape(tcp::socket sock, const MetricsServer::Render& render)
      : stream_(std::move(sock)), render_(render) {}
  void Start() {
    stream_.expires_after(std::chrono::seconds(2));
    http::async_read(stream_, buf_, req_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->Answer();
                     });
  }

 private:
  void Answer() {
    const bool ok = req_.method() == http::verb::get && req_.target() == "/metrics";
    res_ = {ok ? http::status::ok : http::status::not_found, req_.version()};
    res_.set(http::field::content_type,
             ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8");
    res_.body() = ok ? render_() : "only GET /metrics is served here\n";
    res_.keep_alive(false);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(2));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    });
  }

  beast::tcp_stream stream_;
  const MetricsServer::Render& render_;
  beast::flat_buffer buf_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

class BeastMetricsServer final : public MetricsServer {
 public:
  BeastMetricsServer(const tcp::endpoint& at, Render render)
      : acceptor_(io_, at), render_(std::move(render)) {}
  ~BeastMetricsServer() override {
    io_.stop();  // every scrape waits asynchronously: run() returns at once
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
      std::make_shared<Scrape>(std::move(sock), render_)->Start();
      Accept();
    });
  }

  // Declared before what uses it: destroyed last, after the scrapes its handlers still hold.
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
