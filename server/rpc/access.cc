#include "server/rpc/access.h"

#include <algorithm>
#include <cstdlib>

namespace shoal {

StatusOr<Caller> AdmitUnixPeer(const AccessPolicy& policy, const UnixPeer& peer) {
  Caller c;
  c.name = "uid " + std::to_string(peer.uid);
  c.admin = peer.uid == 0 || peer.uid == policy.daemon_uid;
  if (c.admin) return c;
  if (policy.group) {
    const gid_t g = *policy.group;
    if (peer.gid == g || std::find(peer.groups.begin(), peer.groups.end(), g) != peer.groups.end())
      return c;
  }
  std::string who = "uid " + std::to_string(policy.daemon_uid) + ", root";
  if (policy.group) who += " and members of group " + std::to_string(*policy.group);
  return PermissionDenied(c.name + " may not use this shoald (it serves " + who + ")");
}

Status MayModify(const Caller& caller, const std::string& submitter, const std::string& what) {
  if (caller.admin || (!submitter.empty() && submitter == caller.name)) return Status::Ok();
  return PermissionDenied(
      what + " was submitted by " +
      (submitter.empty() ? std::string("an unrecorded user") : submitter) +
      "; only its submitter or an admin (root, the daemon's user) may change it");
}

void PeerTable::Set(int fd, const UnixPeer& peer) {
  std::lock_guard<std::mutex> l(mu_);
  peers_[fd] = peer;
}

std::optional<UnixPeer> PeerTable::Find(const std::string& grpc_peer) const {
  if (grpc_peer.rfind("fd:", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long fd = std::strtol(grpc_peer.c_str() + 3, &end, 10);
  if (end == grpc_peer.c_str() + 3 || *end != '\0') return std::nullopt;
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(int(fd));
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace shoal
