#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for SECONDS (default 20:
# what CI runs), printing executions and crashes per target. A crash fails the script and leaves
# its input in build-fuzz/fuzz/crash-*.
#   deploy/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
deploy/install-deps.sh
# -O1 with line tables: libFuzzer's recommended build, and a third faster to compile than -O2 -g.
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -gline-tables-only" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHOAL_FUZZ=ON -DSHOAL_BUILD_TESTS=OFF \
  >/dev/null
targets=(fuzz_spec fuzz_sweep fuzz_idx fuzz_ipc)
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
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
