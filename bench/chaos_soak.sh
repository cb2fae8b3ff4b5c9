#!/usr/bin/env bash
# Longer chaos run than CI's: N rounds of killing a random process (worker, leader, forkserver
# or the daemon) of a running experiment, then checking for leaks and lost records.
#   bench/chaos_soak.sh [ROUNDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export SHOAL_CHAOS_ROUNDS=${1:-50}
[ -n "${2:-}" ] && export SHOAL_CHAOS_SEED=$2
build/tests/e2e_tests --gtest_filter=Lifecycle.Chaos 2>&1 | grep -E '^chaos:|FAILED|PASSED|Failure' 
