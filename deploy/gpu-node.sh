#!/usr/bin/env bash
# On a GPU node that has a PyTorch with CUDA but none of this project's Debian packages, with
# .gpu-bundle/ made by deploy/make-gpu-bundle.sh on a machine that has them:
#   1. builds shoal-worker alone against the node's LibTorch (torch.utils.cmake_prefix_path) and
#      the bundle (nothing else is needed: CMake, a C++ compiler, PyTorch);
#   2. starts the bundled shoald on it, with a socket and state directory under $SHOAL_GPU_DIR
#      (--allow-commands: the command kind's checks run the node's python3 under it);
#   (SHOAL_WORKER_BIN names a shoal-worker built earlier on such a node, to skip the build);
#   3. runs what is given after the script's name with SHOAL (the CLI) and SHOAL_DIR set (and
#      SHOAL_BIN_DIR, SHOAL_WORKER_PATH: the bundle's binaries and the worker built), e.g.
#      deploy/gpu-node.sh bench/gpu_check.sh
# and stops the daemon at the end, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=$ROOT/.gpu-bundle
[ -d "$BUNDLE/gen" ] || { echo "no $BUNDLE: run deploy/make-gpu-bundle.sh where Shoal builds" >&2; exit 1; }
PY=${SHOAL_PYTHON:-python3}
# PyTorch's LibTorch (SHOAL_TORCH_DIR names another TorchConfig.cmake directory).
TORCH_DIR=${SHOAL_TORCH_DIR:-$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch}
TORCH_LIB=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
BUILD=${SHOAL_GPU_BUILD:-build-gpu}
# LibTorch 2.13 and later need C++20 in every file that includes ATen; older ones build as C++17.
CXX_STD=$("$PY" -c 'import torch; v = tuple(int(x) for x in torch.__version__.split(".")[:2]); print(20 if v >= (2, 13) else 17)')
if [ -n "${SHOAL_WORKER_BIN:-}" ]; then
  WORKER=$SHOAL_WORKER_BIN  # one built earlier on a node like this one
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DCMAKE_CXX_STANDARD="$CXX_STD" -DSHOAL_WORKER_ONLY=ON -DSHOAL_BUNDLE="$BUNDLE" \
    -DTorch_DIR="$TORCH_DIR" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target shoal-worker
  WORKER=$ROOT/$BUILD/bin/shoal-worker
fi
export LD_LIBRARY_PATH=$BUNDLE/lib:$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$WORKER" --version

DIR=${SHOAL_GPU_DIR:-$(mktemp -d /tmp/shoal-gpu.XXXXXX)}
mkdir -p "$DIR"
export SHOAL_DIR=$DIR
export SHOAL="$BUNDLE/bin/shoal --socket $DIR/shoal.sock"
# For what starts daemons of its own (bench/*_vs_pytorch.py: --bin, --worker-bin).
export SHOAL_BIN_DIR=$BUNDLE/bin SHOAL_WORKER_PATH=$WORKER
# Its log (stdout and stderr) both shown and kept in $SHOAL_DIR/shoald.log.
"$BUNDLE/bin/shoald" --socket "$DIR/shoal.sock" --state-dir "$DIR/state" \
  --worker-bin "$WORKER" --log-level info --allow-commands > >(tee "$DIR/shoald.log") 2>&1 &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$DIR/shoal.sock" ] && break; sleep 0.1; done
$SHOAL node
if [ $# -gt 0 ]; then "$@"; fi
