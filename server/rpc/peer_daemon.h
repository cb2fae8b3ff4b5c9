// The federating daemon's gRPC client of other nodes' daemons: shoal's own client, over TCP with
// TLS (or plaintext to a loopback daemon) and this daemon's peer token, with keepalive pings so a
// dead daemon or a cut link ends a watch within seconds.
#pragma once

#include <string>

#include "server/federation.h"

namespace shoal {

struct PeerCredentials {
  std::string token;                      // bearer token every peer's --token-file knows
  std::string tls_ca, tls_cert, tls_key;  // PEM texts: the peers' CA; a client pair (mTLS)
  bool insecure = false;                  // plaintext, to loopback daemons only
  int keepalive_ms = 2000;
  int call_timeout_s = 5;
};

PeerConnector GrpcPeers(PeerCredentials creds);

}  // namespace shoal
