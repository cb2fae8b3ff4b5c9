#include "server/rpc/peer_daemon.h"

#include "client/shoal_client.h"
#include "shared/endpoint.h"

namespace shoal {
namespace {

class GrpcPeer : public PeerDaemon {
 public:
  explicit GrpcPeer(const cli::Endpoint& e) : client_(e) {}
  StatusOr<std::string> Submit(const v1::ExperimentSpec& spec) override {
    return client_.Submit(spec);
  }
  StatusOr<v1::Experiment> Get(const std::string& id) override { return client_.Get(id); }
  StatusOr<v1::Experiment> Cancel(const std::string& id) override { return client_.Cancel(id); }
  Status Watch(const std::string& id,
               const std::function<void(const v1::WatchEvent&)>& on_event) override {
    return client_.Watch(id, on_event);
  }
  void Interrupt() override { client_.CancelWatches(); }

 private:
  cli::ShoalClient client_;
};

}  // namespace

PeerConnector GrpcPeers(PeerCredentials creds) {
  return [creds](const std::string& daemon) -> StatusOr<std::unique_ptr<PeerDaemon>> {
    ASSIGN_OR_RETURN(auto host_port, ParseHostPort("node_daemons", daemon));
    if (creds.insecure && !IsLoopbackHost(host_port.first)) {
      return FailedPrecondition(
          "this shoald reaches peers in plaintext (--peer-insecure), which is allowed to "
          "loopback daemons only; give it --peer-tls-ca instead");
    }
    cli::Endpoint e;
    e.target = daemon;
    e.token = creds.token;
    e.tls_ca = creds.tls_ca;
    e.tls_cert = creds.tls_cert;
    e.tls_key = creds.tls_key;
    e.insecure = creds.insecure;
    e.keepalive_ms = creds.keepalive_ms;
    e.call_timeout_s = creds.call_timeout_s;
    return std::unique_ptr<PeerDaemon>(std::make_unique<GrpcPeer>(e));
  };
}

}  // namespace shoal
