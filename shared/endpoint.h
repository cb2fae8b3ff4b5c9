// Where shoald listens by default, and how a client makes sure the socket it is about to talk to
// is the daemon it trusts and not an impostor that got to the path first.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "shared/status.h"

namespace shoal {

// $HOME/.local/state/shoal, or /var/lib/shoal without a HOME.
std::string DefaultStateDir();

// $SHOAL_SOCKET; else $XDG_RUNTIME_DIR/shoal.sock when that directory is the user's own (mode
// 0700, as systemd makes it); else DefaultStateDir()/shoal.sock. Never a directory others can
// write, so no other user can take the path first.
std::string DefaultSocketPath();

// What a client needs to know of a path: lstat's owner, mode and type.
struct PathInfo {
  uid_t uid = 0;
  mode_t mode = 0;  // st_mode: type and permission bits
};

// Whether to talk to the socket: it must be a socket owned by `me`, root or `trusted` (the user
// a shared daemon runs as), in a directory owned by one of them that nobody else can write (or
// that is sticky, like /tmp: others cannot replace what is in it). PERMISSION_DENIED names what
// is wrong and how to trust it.
Status JudgeSocket(const std::string& path, const PathInfo& socket, const PathInfo& dir, uid_t me,
                   std::optional<uid_t> trusted);

// "HOST:PORT" or "[IPv6]:PORT" -> host (brackets dropped) and port (1..65535); INVALID_ARGUMENT
// naming `field` otherwise. For --target, --listen and a data_parallel master.
StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& field,
                                                         const std::string& text);

// True for a host name or address that stays on this machine: localhost, 127.x.x.x, ::1 (no
// brackets: ParseHostPort drops them).
bool IsLoopbackHost(const std::string& host);

// JudgeSocket on the real file system (lstat of the path and its directory).
Status CheckSocketTrust(const std::string& path, uid_t me, std::optional<uid_t> trusted);

}  // namespace shoal
