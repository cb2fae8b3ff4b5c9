#!/usr/bin/env bash
# Compiles shoal-worker's sources (syntax only) against a LibTorch 2 -- Debian trixie's
# libtorch-dev headers, downloaded once into build-libtorch2/ without being installed -- so that
# an API LibTorch 2 changed is found here, not in a lent GPU node's build (the GPU bundle builds
# the worker there against PyTorch 2.x: docs/gpu-node.md). Run after deploy/build.sh (it reads
# that build's generated messages). Prints each file that fails and exits 1 if any did.
#   deploy/check-libtorch2.sh [FILE.cc...]     (default: every worker source but data_parallel's,
#                                               which a node without Gloo's headers leaves out too)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build-libtorch2
[ -d build/proto/shoal ] || { echo "no build/proto: run deploy/build.sh first" >&2; exit 2; }
if [ ! -d "$OUT/root/usr/include/ATen" ]; then
  mkdir -p "$OUT/lists/partial" "$OUT/debs"
  echo "deb http://deb.debian.org/debian trixie main" >"$OUT/sources.list"
  A="-o Dir::Etc::SourceList=$OUT/sources.list -o Dir::Etc::SourceParts=/dev/null"
  A="$A -o Dir::State::Lists=$OUT/lists"
  apt-get $A update >/dev/null || exit 2
  (cd "$OUT/debs" && apt-get $A download libtorch-dev 2>/dev/null) || exit 2
  dpkg -x "$OUT"/debs/libtorch-dev_*.deb "$OUT/root"
fi
INC="$OUT/root/usr/include"
echo "LibTorch $(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH)/{printf "%s.", $3}' "$INC/torch/csrc/api/include/torch/version.h")"
if [ $# -gt 0 ]; then files=("$@"); else
  mapfile -t files < <(find worker -name '*.cc' -not -path 'worker/kinds/data_parallel/*' | sort)
fi
failed=0
check() {
  # -include: shoal_training compiles with <torch/torch.h> precompiled (worker/CMakeLists.txt).
  g++ -std=gnu++17 -fsyntax-only -fopenmp -w -include torch/torch.h -D_GLIBCXX_USE_CXX11_ABI=1 -DSHOAL_WITH_GLOO=0 \
    -I"$ROOT" -I"$ROOT/build/proto" -I"$INC" -I"$INC/torch/csrc/api/include" "$1" 2>&1 | grep -E 'error' | head -5
}
export -f check; export ROOT INC
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} bash -c 'e=$(check {}); if [ -n "$e" ]; then echo "FAIL {}"; echo "$e"; else echo "ok   {}"; fi' |
  tee "$OUT/last.log"
grep -q '^FAIL' "$OUT/last.log" && failed=1
exit $failed
