#include "server/rpc/access.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "shared/kinds/kind.h"
#include "shared/os/procfs.h"

namespace shoal {

StatusOr<Caller> AdmitUnixPeer(const AccessPolicy& policy, const UnixPeer& peer) {
  Caller c;
  c.name = "uid " + std::to_string(peer.uid);
  c.admin = peer.uid == 0 || peer.uid == policy.daemon_uid;
  c.may_run_code = c.admin;  // code it runs is shoald's user's: only that user (or root)
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

Status MayRunKinds(const Caller& caller, bool daemon_allows,
                   const std::vector<std::string>& kinds) {
  for (const std::string& name : kinds) {
    const KindRules* kind = FindKind(name);
    if (kind == nullptr || !kind->runs_user_code) continue;
    if (!daemon_allows)
      return PermissionDenied("kind " + name +
                              " runs a program of yours as shoald's user, and this shoald was "
                              "started without --allow-commands");
    if (!caller.may_run_code)
      return PermissionDenied("kind " + name + ": " + caller.name +
                              " may not run programs as shoald's user (its own uid, root, or a "
                              "token marked 'commands' in the token file may)");
  }
  return Status::Ok();
}

Status CheckCallerName(const std::string& field, const std::string& name) {
  const bool uid = name.rfind("uid ", 0) == 0 && name.size() > 4 &&
                   name.find_first_not_of("0123456789", 4) == std::string::npos;
  const bool token = name.rfind("token ", 0) == 0 && name.size() > 6;
  if (uid || token) return Status::Ok();
  return InvalidArgument(field + ": '" + name +
                         "' is not a caller's name ('uid 1000', 'token NAME')");
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

namespace {

bool SameInConstantTime(const std::string& stored, const std::string& given) {
  size_t diff = stored.size() ^ given.size();
  for (size_t i = 0; i < stored.size(); ++i)
    diff |= uint8_t(stored[i]) ^ uint8_t(i < given.size() ? given[i] : 0);
  return diff == 0;
}

}  // namespace

StatusOr<TokenTable> TokenTable::Parse(const std::string& text, const std::string& source) {
  TokenTable t;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string name, token, flag;
    if (!(words >> name)) continue;
    const std::string where = source + " line " + std::to_string(n);
    if (!(words >> token) || token.size() < 16)
      return InvalidArgument(
          where + ": want NAME TOKEN [admin] [commands], a token of 16 characters or more");
    Caller c{"token " + name};
    while (words >> flag) {
      if (flag == "admin" && !c.admin) {
        c.admin = true;
      } else if (flag == "commands" && !c.may_run_code) {
        c.may_run_code = true;
      } else {
        return InvalidArgument(where + ": after the token only 'admin' and 'commands' may follow");
      }
    }
    t.entries_.push_back({token, c});
  }
  if (t.entries_.empty()) return InvalidArgument(source + ": no tokens");
  return t;
}

StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return InvalidArgument("token file " + path + ": not found");
  if ((st.st_mode & 077) != 0)
    return InvalidArgument("token file " + path + ": readable by others (chmod 600 it)");
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  return Parse(text, "token file " + path);
}

std::optional<Caller> TokenTable::Find(const std::string& token) const {
  std::optional<Caller> found;
  for (const auto& e : entries_)  // every entry, so the time says nothing of which matched
    if (SameInConstantTime(e.token, token) && !found) found = e.caller;
  return found;
}

StatusOr<Caller> IdentifyCaller(const std::string& grpc_peer,
                                const std::optional<std::string>& authorization,
                                const PeerTable& peers, const AccessPolicy& policy,
                                const TokenTable* tokens) {
  if (const std::optional<UnixPeer> peer = peers.Find(grpc_peer))
    return AdmitUnixPeer(policy, *peer);
  if (tokens == nullptr) return Unauthenticated("unknown peer " + grpc_peer);
  const std::string kBearer = "Bearer ";
  if (!authorization || authorization->rfind(kBearer, 0) != 0)
    return Unauthenticated("a request over TCP needs a bearer token (shoal --token-file FILE)");
  if (auto caller = tokens->Find(authorization->substr(kBearer.size()))) return *caller;
  return Unauthenticated("the bearer token is not one this shoald knows");
}

}  // namespace shoal
