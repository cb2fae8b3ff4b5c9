#!/bin/bash
cd /work/main/bench
R=../bench/results/2026-11-30/zoo
/usr/bin/python3 zoo_vs_pytorch.py --models resnet50,vit_b_16,efficientnet_b0,densenet121,gpt --start spawn --workers 2 --out $R/spawn
/usr/bin/python3 zoo_vs_pytorch.py --models vit_b_16,efficientnet_b0,mobilenet_v3_large --start forkserver --workers 2 --out $R/forkserver
/usr/bin/python3 zoo_vs_pytorch.py --models resnet50,vit_b_16 --start fork --workers 2 --out $R/fork
/usr/bin/python3 zoo_vs_pytorch.py --models mobilenet_v3_large,resnet50 --start fork --workers 1,4 --out $R/fork-1-4
echo ALL DONE
