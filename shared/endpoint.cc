#include "shared/endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace shoal {
namespace {

bool OwnDirectory(const char* dir) {
  struct stat st {};
  return dir != nullptr && dir[0] == '/' && ::stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
         st.st_uid == ::getuid() && (st.st_mode & 0077) == 0;
}

std::string ParentOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string Owner(uid_t uid) { return "uid " + std::to_string(uid); }

}  // namespace

std::string DefaultStateDir() {
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.local/state/shoal";
  return "/var/lib/shoal";
}

std::string DefaultSocketPath() {
  if (const char* s = std::getenv("SHOAL_SOCKET")) return s;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (OwnDirectory(runtime)) return std::string(runtime) + "/shoal.sock";
  return DefaultStateDir() + "/shoal.sock";
}

Status JudgeSocket(const std::string& path, const PathInfo& socket, const PathInfo& dir, uid_t me,
                   std::optional<uid_t> trusted) {
  auto ok_owner = [&](uid_t u) { return u == me || u == 0 || (trusted && u == *trusted); };
  const std::string how =
      " (someone else's socket could be an impostor; if that user runs the shoald you mean, pass "
      "--socket-owner " +
      std::to_string(socket.uid) + ")";
  if (!S_ISSOCK(socket.mode)) return PermissionDenied(path + " is not a socket");
  if (!ok_owner(socket.uid))
    return PermissionDenied("refusing " + path + ": it belongs to " + Owner(socket.uid) + how);
  if (!ok_owner(dir.uid)) {
    return PermissionDenied("refusing " + path + ": its directory belongs to " + Owner(dir.uid) +
                            ", who could replace the socket");
  }
  if ((dir.mode & 0022) != 0 && (dir.mode & S_ISVTX) == 0) {
    return PermissionDenied("refusing " + path +
                            ": others can write its directory and replace the socket");
  }
  return Status::Ok();
}

Status CheckSocketTrust(const std::string& path, uid_t me, std::optional<uid_t> trusted) {
  struct stat s {
  }, d{};
  if (::lstat(path.c_str(), &s) != 0)
    return Unavailable("cannot reach shoald at " + path + ": no socket there (is it running?)");
  const std::string dir = ParentOf(path);
  if (::stat(dir.c_str(), &d) != 0) return Unavailable("cannot read the directory of " + path);
  return JudgeSocket(path, {s.st_uid, s.st_mode}, {d.st_uid, d.st_mode}, me, trusted);
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& field,
                                                         const std::string& text) {
  const size_t colon = text.rfind(':');
  const std::string why = field + ": '" + text + "' is not HOST:PORT with a port 1..65535";
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return InvalidArgument(why);
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument(why);
  const unsigned long p = std::stoul(port);
  if (p < 1 || p > 65535) return InvalidArgument(why);
  std::string host = text.substr(0, colon);
  const bool v6 = host.size() > 2 && host.front() == '[' && host.back() == ']';  // [IPv6]:PORT
  if (v6) host = host.substr(1, host.size() - 2);
  // A space or a stray character would pass here and fail only when the run connects.
  const char* allowed = v6 ? "0123456789abcdefABCDEF:."
                           : "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-_";
  if (host.find_first_not_of(allowed) != std::string::npos) {
    return InvalidArgument(field + ": '" + text + "': '" + host + "' is not a host name or " +
                           (v6 ? "an IPv6 address" : "an IPv4 address ([IPv6]:PORT for IPv6)"));
  }
  return std::make_pair(host, uint16_t(p));
}

}  // namespace shoal
