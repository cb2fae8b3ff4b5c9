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
  // May run a program of its own as shoald's user (kind command): shoald's uid, root, or a token
  // marked `commands`.
  bool may_run_code = false;
};

// OK when `name` has a caller's form ("uid N" or "token NAME"); INVALID_ARGUMENT naming `field`
// otherwise (a filter by a name no caller can have).
Status CheckCallerName(const std::string& field, const std::string& name);

// OK with the caller, or PERMISSION_DENIED saying who may connect.
StatusOr<Caller> AdmitUnixPeer(const AccessPolicy& policy, const UnixPeer& peer);

// Whether `caller` may cancel or delete a record `submitter` made (records made before
// submitters were recorded have none: only admins may touch them).
Status MayModify(const Caller& caller, const std::string& submitter, const std::string& what);

// OK when `caller` may have the daemon run what `kinds` name: a kind that runs the caller's own
// program (kind command) needs a daemon started with --allow-commands and a caller that may run
// code as its user; PERMISSION_DENIED saying which is missing otherwise.
Status MayRunKinds(const Caller& caller, bool daemon_allows, const std::vector<std::string>& kinds);

// Bearer tokens for TCP clients, from --token-file: one "NAME TOKEN [admin] [commands]" per line
// (`commands`: may run kind command; # starts
// a comment). The file must be readable by its owner only, as ssh demands of its keys.
class TokenTable {
 public:
  static StatusOr<TokenTable> Load(const std::string& path);
  static StatusOr<TokenTable> Parse(const std::string& text, const std::string& source);
  // The caller whose token this is; compared in constant time.
  std::optional<Caller> Find(const std::string& token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    Caller caller;
  };
  std::vector<Entry> entries_;
};

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

// Who makes a request: on the unix socket the peer's credentials (PeerTable, by gRPC's "fd:N"
// name), judged by the policy; over TCP the bearer token of its "authorization" metadata.
// UNAUTHENTICATED without a known token; the token is never part of a message.
StatusOr<Caller> IdentifyCaller(const std::string& grpc_peer,
                                const std::optional<std::string>& authorization,
                                const PeerTable& peers, const AccessPolicy& policy,
                                const TokenTable* tokens);

}  // namespace shoal
