#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the unit tests under ASan+UBSan (the
# parts that do not load LibTorch) and the fuzz targets for 2 s each from one clang build, then
# the rest of the suite under ctest (the measured end-to-end tests one at a time, the others
# beside each other).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
# One clang build under ASan+UBSan serves both: the unit tests run under it, then every parser of
# outside input is fuzzed briefly (longer: deploy/fuzz.sh 600).
seconds=2
[ "${SHOAL_SKIP_FUZZ:-0}" = 1 ] && seconds=0
# The unit tests run once: under the sanitizers when that build ran them (the gcc build below
# leaves them out rather than compile them a second time), else in the gcc build.
unit_tests=ON
if [ "${SHOAL_SKIP_SANITIZE:-0}" != 1 ]; then
  deploy/fuzz.sh "$seconds" --with-unit-tests
  unit_tests=OFF
elif [ "$seconds" -gt 0 ]; then
  deploy/fuzz.sh "$seconds"
fi
deploy/build.sh -DSHOAL_UNIT_TESTS=$unit_tests
cd build
# A fresh tree has no measured costs: start from the committed ones, so the longest tests start
# first rather than in declaration order (docs/tests.md, "Longest first").
costs=Testing/Temporary/CTestCostData.txt
[ -s "$costs" ] || { mkdir -p Testing/Temporary && cp ../tests/ctest-costs.txt "$costs"; }
ctest --output-on-failure --timeout 600 -j"$(nproc)"
