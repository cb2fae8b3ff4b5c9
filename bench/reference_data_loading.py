"""The PyTorch reference for data_loading (seed 003): the study's ConvNet trained on Fashion-MNIST
fed by torch.utils.data.DataLoader with --loaders worker processes (0: the main process loads),
each sample augmented the way torchvision's tutorials write it: RandomCrop(28, padding=4),
RandomHorizontalFlip(), ToTensor(), Normalize((0.1307,), (0.3081,)), shuffled each epoch, batches
of --batch-size, prefetch_factor --prefetch, the start method as --start.

--tuning users: PIL images through torchvision's transforms, glibc's defaults, PyTorch's threads.
--tuning best: glibc's thresholds raised (tuning.py) and the same transforms on tensors (no PIL).
Per epoch: the time waiting for the next batch, computing (forward, backward, step), the epoch,
and the CPU time spent making batches (__getitem__ and collate, thread CPU summed over the
processes that did it). Prints one JSON object with those and the peak PSS/RSS sums.
"""
import os
import time

T0 = float(os.environ.get("SHOAL_REFERENCE_T0", time.time()))

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tuning import reexec_if_best  # noqa: E402

reexec_if_best(T0)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, Dataset, RandomSampler, default_collate  # noqa: E402
from torchvision import transforms  # noqa: E402

from torch_reference import Net, PssSampler, load_split  # noqa: E402

MEAN, STD = (0.1307,), (0.3081,)


class Augmented(Dataset):
    """The training set; each item cropped, flipped and normalised, its CPU time counted."""

    def __init__(self, images, labels, use_pil, cpu):
        self.images, self.labels, self.use_pil, self.cpu = images, labels, use_pil, cpu
        crop_flip = [transforms.RandomCrop(28, padding=4), transforms.RandomHorizontalFlip()]
        if use_pil:
            self.transform = transforms.Compose(crop_flip + [transforms.ToTensor(),
                                                             transforms.Normalize(MEAN, STD)])
        else:
            self.transform = transforms.Compose(crop_flip + [transforms.Normalize(MEAN, STD)])

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        t0 = time.thread_time()
        img = self.images[i]
        img = Image.fromarray(img.numpy(), mode="L") if self.use_pil else img.float().div(255)[None]
        out = (self.transform(img), int(self.labels[i]))
        with self.cpu.get_lock():
            self.cpu.value += time.thread_time() - t0
        return out


class TimedCollate:
    """default_collate, its CPU time added to the same counter (picklable for spawn)."""

    def __init__(self, cpu):
        self.cpu = cpu

    def __call__(self, batch):
        t0 = time.thread_time()
        out = default_collate(batch)
        with self.cpu.get_lock():
            self.cpu.value += time.thread_time() - t0
        return out


def run_epoch(model, optimizer, loader, cpu):
    wait = compute = 0.0
    cpu_before = cpu.value
    t_epoch = time.perf_counter()
    it = iter(loader)
    samples = 0
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        wait += t1 - t0
        compute += time.perf_counter() - t1
        samples += len(y)
    return {"data_s": wait, "compute_s": compute, "epoch_s": time.perf_counter() - t_epoch,
            "load_cpu_s": cpu.value - cpu_before, "samples": samples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loaders", type=int, default=0)
    ap.add_argument("--start", choices=["fork", "spawn", "forkserver"], default="fork")
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--epoch-samples", type=int, default=0, help="0: the whole set")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="the trainer's; 0: PyTorch's default")
    ap.add_argument("--tuning", choices=["users", "best"], default="users")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--sample-ms", type=int, default=200)
    ap.add_argument("--persistent-workers", action="store_true",
                    help="keep the loader processes across epochs (DataLoader's default: off)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    images, labels = load_split(args.dataset)
    cpu = mp.get_context(args.start).Value("d", 0.0)
    data = Augmented(images, labels, args.tuning == "users", cpu)
    gen = torch.Generator().manual_seed(args.seed)
    sampler = RandomSampler(data, num_samples=args.epoch_samples or len(data), generator=gen)
    extra = {"multiprocessing_context": args.start, "prefetch_factor": args.prefetch,
             "persistent_workers": args.persistent_workers} if args.loaders > 0 else {}
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.loaders, collate_fn=TimedCollate(cpu), **extra)
    torch.manual_seed(args.seed)
    model = Net()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    with PssSampler(args.sample_ms) as pss:
        epochs = [run_epoch(model, optimizer, loader, cpu) for _ in range(args.epochs)]
    print(json.dumps({"epochs": epochs, "peak_pss_sum_bytes": pss.peak["pss"],
                      "peak_rss_sum_bytes": pss.peak["rss"], "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
