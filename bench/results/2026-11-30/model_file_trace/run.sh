#!/bin/bash
# The model files' own peak PSS against a fast reader (trace_peak.py: every process below a fresh
# shoald, read every 2 ms plus the reads' own time), after this session's fix, 3 runs each.
# The archives: bench/zoo_models.py /tmp/zoo --image 64 --only mobilenet_v3_large,efficientnet_b0
D=$(dirname "$0")
while pgrep -f hogwild_vs_pytorch >/dev/null; do sleep 5; done
for i in 1 2 3; do
  SAMPLES_CSV=$D/mobilenet_fork_1_$i.csv /usr/bin/python3 $D/trace_peak.py --model-file /tmp/zoo/mobilenet_v3_large.pt --input 'float32[B,3,64,64]' --classes 10 --workers 1 --start fork --batches 8 --batch-size 8 > $D/mobilenet_fork_1_$i.txt 2>&1
  SAMPLES_CSV=$D/efficientnet_forkserver_2_$i.csv /usr/bin/python3 $D/trace_peak.py --model-file /tmp/zoo/efficientnet_b0.pt --input 'float32[B,3,64,64]' --classes 10 --workers 2 --start forkserver --batches 8 --batch-size 8 > $D/efficientnet_forkserver_2_$i.txt 2>&1
  SAMPLES_CSV=$D/mobilenet_forkserver_2_$i.csv /usr/bin/python3 $D/trace_peak.py --model-file /tmp/zoo/mobilenet_v3_large.pt --input 'float32[B,3,64,64]' --classes 10 --workers 2 --start forkserver --batches 8 --batch-size 8 > $D/mobilenet_forkserver_2_$i.txt 2>&1
done
echo ALL DONE
