#!/bin/bash
# After run2.sh: lean activations at 8 workers of every start method, the 4-16 run's 5 steps.
while pgrep -f zoo/run2.sh >/dev/null; do sleep 10; done
cd /work/main/bench
/usr/bin/python3 hogwild_vs_pytorch.py --start fork,spawn,forkserver --workers 8 --allocator default+lean --batches 5 --repeats 3 --out ../bench/results/2026-11-30/lean_8_workers
echo ALL DONE
