#!/usr/bin/env bash
# Builds the unit tests under ThreadSanitizer (clang, build-tsan/) and runs them; any report
# fails the script. Not part of deploy/test.sh: TSan cannot share the ASan+UBSan build, and its
# own build (~3 min on 2 cores) would push CI past its budget.
#
# Only the unit tests: shoald itself links Debian's gRPC, which is not instrumented, so TSan
# cannot see gRPC's own synchronisation and reports every hand-over between its threads (tried
# on the end-to-end tests: every report had a gRPC, Abseil or protobuf frame on one side).
#   deploy/tsan.sh [GTEST_FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-*}"
deploy/install-deps.sh
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ "-DCMAKE_CXX_FLAGS=-O1 -gline-tables-only -fsanitize=thread" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread" \
  -DSHOAL_BUILD_TESTS=ON >/dev/null
cmake --build build-tsan -j"$(nproc)" --target unit_tests
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  build-tsan/tests/unit_tests --gtest_brief=1 --gtest_filter="$filter"
