// Who may use this shoald, and who is calling. On the unix socket the kernel says who the peer is
// (SO_PEERCRED, read when the connection is accepted: server/rpc/unix_listener.h); the daemon's
// own user, root and the members of --socket-group may connect, everyone else is
// PERMISSION_DENIED. Admins (root and the daemon's user) may cancel or delete anyone's records;
// others only their own.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

// A process at the other end of a unix connection, as the kernel reported it.
struct UnixPeer {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, from the user database
};

struct AccessPolicy {
  uid_t daemon_uid = 0;
  std::optional<gid_t> group;  // --socket-group
};

// The authenticated caller of one request.
struct Caller {
  std::string name;  // "uid 1000" (unix) or "token NAME" (TCP)
  bool admin = false;
};

// OK with the caller, or PERMISSION_DENIED saying who may connect.
StatusOr<Caller> AdmitUnixPeer(const AccessPolicy& policy, const UnixPeer& peer);

// Whether `caller` may cancel or delete a record `submitter` made (records made before
// submitters were recorded have none: only admins may touch them).
Status MayModify(const Caller& caller, const std::string& submitter, const std::string& what);

// The peer of each accepted connection, by the name gRPC gives it ("fd:N"); an fd number is
// reused only after its connection closed, when the next accept overwrites it.
class PeerTable {
 public:
  void Set(int fd, const UnixPeer& peer);
  std::optional<UnixPeer> Find(const std::string& grpc_peer) const;

 private:
  mutable std::mutex mu_;
  std::map<int, UnixPeer> peers_;
};

}  // namespace shoal
