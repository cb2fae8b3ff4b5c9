#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the unit tests under ASan+UBSan (the
# parts that do not load LibTorch), the fuzz targets for 5 s each, then the whole suite under
# ctest (end-to-end tests one at a time, the others beside each other).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
if [ "${SHOAL_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHOAL_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)" --target unit_tests
  ASAN_OPTIONS=detect_leaks=1 build-asan/tests/unit_tests --gtest_brief=1
fi
if [ "${SHOAL_SKIP_FUZZ:-0}" != 1 ]; then
  deploy/fuzz.sh 5  # every parser of outside input, briefly; longer: deploy/fuzz.sh 600
fi
deploy/build.sh
cd build
ctest --output-on-failure --timeout 600 -j"$(nproc)"
