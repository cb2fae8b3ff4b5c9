"""Where shoald is and whether to trust it: the CLI's rules (docs/security.md), in Python."""
from __future__ import annotations

import ipaddress
import os
import stat
from typing import Optional, Sequence, Tuple

import grpc

from shoal._errors import ShoalError


def default_socket() -> str:
    """$SHOAL_SOCKET; else $XDG_RUNTIME_DIR/shoal.sock when that folder is the user's own
    (0700); else ~/.local/state/shoal/shoal.sock (/var/lib/shoal/shoal.sock without $HOME)."""
    if os.environ.get("SHOAL_SOCKET"):
        return os.environ["SHOAL_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime:
        try:
            st = os.stat(runtime)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700:
                return os.path.join(runtime, "shoal.sock")
        except OSError:
            pass
    home = os.environ.get("HOME", "")
    if not home:
        return "/var/lib/shoal/shoal.sock"
    return os.path.join(home, ".local", "state", "shoal", "shoal.sock")


def check_socket(path: str, socket_owner: Optional[int] = None) -> None:
    """Refuses a socket someone else could have put there, before a spec reaches it: the socket
    must belong to the user, root or `socket_owner`, in a folder one of them owns that no one
    else may write (or that is sticky, like /tmp)."""
    trusted = {os.geteuid(), 0} | ({socket_owner} if socket_owner is not None else set())
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ShoalError("UNAVAILABLE",
                         f"cannot reach shoald at {path}: no socket there (is it running?)")
    if not stat.S_ISSOCK(st.st_mode):
        raise ShoalError("UNAVAILABLE", f"{path} is not a socket")
    if st.st_uid not in trusted:
        raise ShoalError("PERMISSION_DENIED",
                         f"refusing {path}: it belongs to uid {st.st_uid} (someone else's socket "
                         f"could be an impostor; if that user runs the shoald you mean, pass "
                         f"socket_owner={st.st_uid})")
    folder = os.path.dirname(os.path.abspath(path))
    d = os.stat(folder)
    writable_by_others = d.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if d.st_uid not in trusted or (writable_by_others and not d.st_mode & stat.S_ISVTX):
        raise ShoalError("PERMISSION_DENIED",
                         f"refusing {path}: its folder {folder} may be written by others")


def _loopback(target: str) -> bool:
    host = target.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def open_channel(socket: Optional[str], target: Optional[str], tls: Optional[str],
                 token: Optional[str], token_file: Optional[str], cert: Optional[str],
                 key: Optional[str], insecure: bool,
                 socket_owner: Optional[int]) -> Tuple[grpc.Channel, Sequence[Tuple[str, str]]]:
    """A channel and the metadata every call carries (the bearer token over TCP)."""
    if target is None:
        if any(x is not None for x in (tls, token, token_file, cert, key)) or insecure:
            raise ShoalError("INVALID_ARGUMENT",
                             "tls, token, token_file, cert, key and insecure are for target=")
        path = socket or default_socket()
        check_socket(path, socket_owner)
        return grpc.insecure_channel("unix:" + path), ()
    if socket is not None:
        raise ShoalError("INVALID_ARGUMENT", "socket= or target=, not both")
    if not target:
        raise ShoalError("INVALID_ARGUMENT", "target: empty (HOST:PORT)")
    if token is None and token_file is not None:
        token = _read(token_file).decode().strip()
    if not token:
        raise ShoalError("INVALID_ARGUMENT", "target= needs token= or token_file=")
    metadata = (("authorization", "Bearer " + token),)
    if insecure:
        if tls is not None or not _loopback(target):
            raise ShoalError("INVALID_ARGUMENT",
                             "insecure=True only to a loopback address without tls (the token "
                             "would cross the network in plaintext)")
        return grpc.insecure_channel(target), metadata
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(tls) if tls else None,
        private_key=_read(key) if key else None,
        certificate_chain=_read(cert) if cert else None)
    return grpc.secure_channel(target, creds), metadata
