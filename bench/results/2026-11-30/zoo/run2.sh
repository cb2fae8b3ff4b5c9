#!/bin/bash
# After run.sh: the zoo's options (optimiser in backward, channels_last), then the allocator
# variants beside PyTorch, one after another (nothing else running).
while pgrep -f zoo/run.sh >/dev/null; do sleep 10; done
cd /work/main/bench
R=../bench/results/2026-11-30
/usr/bin/python3 zoo_vs_pytorch.py --models vit_b_16,resnet50 --start spawn,fork --workers 2 --shoal-flags '--optimizer-in-backward yes' --out $R/zoo/in-backward
/usr/bin/python3 zoo_vs_pytorch.py --models vit_b_16,mobilenet_v3_large --start forkserver --workers 2 --shoal-flags '--optimizer-in-backward yes' --out $R/zoo/in-backward-forkserver
/usr/bin/python3 zoo_vs_pytorch.py --models gpt --start spawn --workers 2 --shoal-flags '--optimizer-in-backward yes' --out $R/zoo/in-backward-gpt
/usr/bin/python3 zoo_vs_pytorch.py --models mobilenet_v3_large,efficientnet_b0,densenet121,resnet50 --start fork --workers 2 --memory-format channels_last --out $R/zoo/channels-last
/usr/bin/python3 hogwild_vs_pytorch.py --start fork --workers 1,2,4 --allocator cache,default,default+lean --batches 20 --repeats 3 --out $R/allocators
echo ALL DONE
