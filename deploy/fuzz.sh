#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for SECONDS (default 20;
# 0 builds them only), printing executions and crashes per target. A crash fails the script and
# leaves its input in build-fuzz/fuzz/crash-*. The whole tree is built under ASan+UBSan, so with
# --with-unit-tests the same build also gives the unit tests under the sanitizers, run first
# (deploy/test.sh: one sanitizer build for both, not two).
#   deploy/fuzz.sh [SECONDS] [--with-unit-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
unit_tests="${2:-}"
tests=OFF
[ "$unit_tests" = --with-unit-tests ] && tests=ON
deploy/install-deps.sh
# -O1 with line tables: libFuzzer's recommended build, and a third faster to compile than -O2 -g.
# The test command's few seconds a target are a smoke test: there -O0, which compiles 2.2x faster
# (30 s -> 14 s for one of the daemon's sources on the 2-core VM), and the build is most of it.
opt=-O1
[ "$seconds" -le 10 ] && opt=-O0
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=$opt -gline-tables-only" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHOAL_FUZZ=ON -DSHOAL_BUILD_TESTS=$tests \
  >/dev/null
targets=(fuzz_spec fuzz_sweep fuzz_idx fuzz_ipc fuzz_report fuzz_input fuzz_weights)
build=("${targets[@]}")
[ "$tests" = ON ] && build+=(unit_tests)
cmake --build build-fuzz -j"$(nproc)" --target "${build[@]}"
if [ "$tests" = ON ]; then
  ASAN_OPTIONS=detect_leaks=1 build-fuzz/tests/unit_tests --gtest_brief=1
fi
[ "$seconds" -gt 0 ] || exit 0
status=0
for t in "${targets[@]}"; do
  corpus="build-fuzz/corpus/$t"
  mkdir -p "$corpus"
  log="build-fuzz/$t.log"
  if (cd build-fuzz/fuzz && ./"$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        "../corpus/$t" >"../$t.log" 2>&1); then
    crashes=0
  else
    crashes=1
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' ||
          grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  echo "fuzz: $t ${seconds}s, executions ${execs:-?}, crashes $crashes"
  [ "$crashes" = 0 ] || tail -30 "$log"
done
exit $status
