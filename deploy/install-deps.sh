#!/usr/bin/env bash
# Installs the Debian packages Shoal builds, runs and benchmarks with; a no-op when all are there.
set -euo pipefail
PACKAGES=(
  build-essential cmake pkg-config iproute2 util-linux
  # Debian's LibTorch calls the BLAS behind libblas.so.3, which is the reference BLAS unless an
  # optimised one is installed: OpenBLAS (OpenMP build, so at::set_num_threads governs it too)
  # runs a 512x768x3072 matmul 16x faster on one core here (3.3 -> 55 GFLOPS), for Shoal and for
  # the PyTorch beside it alike (docs/your-model.md, "Speed").
  libopenblas0-openmp
  libtorch-dev libgloo-dev libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libboost-dev libspdlog-dev libgtest-dev libsqlite3-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  dataset-fashion-mnist python3-torch python3-torchvision python3-prometheus-client python3-grpcio python3-protobuf clang libclang-rt-14-dev openssl systemd
  # The Slurm tests (a two-node Slurm in network namespaces, tests/cluster_e2e_test.cc); under a
  # systemd init Debian enables their services, which stay inactive without /etc/slurm/slurm.conf.
  slurmctld slurmd slurm-client munge
  # The HTML report's test renders it in a real headless browser (tests/sweep_e2e_test.cc).
  chromium
  # The Python package (client/python): pip into a venv, its tests, DataFrames, the notebook
  # CI executes (docs/python.md).
  python3-venv python3-pip python3-setuptools python3-wheel python3-pytest python3-pandas
  python3-nbconvert python3-nbclient python3-ipykernel jupyter-nbconvert
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "shoal: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
