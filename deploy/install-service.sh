#!/usr/bin/env bash
# Installs shoald as a system service (run as root after deploy/build.sh): the binaries into
# /usr/local/bin, a "shoal" system user and group, /etc/shoal/shoald.toml (kept if present) and the
# unit, then enables and starts it. Users in group "shoal" can then run `shoal --socket
# /run/shoal/shoal.sock --socket-owner $(id -u shoal) node`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "install-service.sh: run as root" >&2; exit 1; }
install -m 0755 build/bin/shoald build/bin/shoal build/bin/shoal-worker build/bin/shoal-leader /usr/local/bin/
getent group shoal >/dev/null || groupadd --system shoal
getent passwd shoal >/dev/null ||
  useradd --system --gid shoal --home-dir /var/lib/shoal --shell /usr/sbin/nologin shoal
install -d -m 0755 /etc/shoal
[ -e /etc/shoal/shoald.toml ] || install -m 0644 deploy/shoald.toml /etc/shoal/shoald.toml
install -m 0644 deploy/shoald.service /etc/systemd/system/shoald.service
systemctl daemon-reload
systemctl enable --now shoald
