#!/usr/bin/env bash
# The figure tests (every FiguresE2E point, 1-16 workers of every start method and multi_model,
# and the command run's CommandFiguresE2E) N times in a row beside a busy loop that takes a core
# (`yes > /dev/null`), as issue 58 asks: one line a run (passed, or the points that failed), every
# run's full log kept in OUT.
#   bench/figures_soak.sh [N=20] [OUT=bench/results/<today>/figures_soak]
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
out="${2:-bench/results/$(date +%F)/figures_soak}"
mkdir -p "$out"
yes > /dev/null &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
passed=0
for i in $(seq 1 "$runs"); do
  log="$out/run-$i.log"
  if build/tests/e2e_tests --gtest_filter='*FiguresE2E*' > "$log" 2>&1; then
    passed=$((passed + 1))
    echo "run $i: passed"
  else
    echo "run $i: FAILED $(grep -o '^\[  FAILED  \] [^ ,]*' "$log" | sort -u | cut -c14- | tr '\n' ' ')"
  fi
done | tee "$out/summary.txt"
echo "beside a busy loop: $(grep -c passed "$out/summary.txt") of $runs runs passed" | tee -a "$out/summary.txt"
