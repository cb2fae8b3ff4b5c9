"""Every torchvision classification model through Shoal's --model-file: does it train?

    python3 bench/zoo_every_model.py --out bench/results/<date>/zoo-every-model [--only a,b]

For each name in torchvision.models.list_models(module=torchvision.models) (80 in torchvision
0.14): the model is built with 10 classes and random init (nothing is downloaded), scripted with
torch.jit.script as a user scripts it, in a Python process of its own; then one shoald (a fresh
state directory) trains it for 2 batches of 2 a worker with 2 workers and 1 thread each. The
kind, start method and weight sharing rotate over the models, so that across the list every one
of hogwild (fork, spawn, forkserver; shared and private) and data_parallel (fork, spawn,
forkserver) trains several of them. Images are 64x64 except where the model needs another size
(below). Each outcome, with Shoal's figures or its error, is one line of raw.jsonl; summary.md is
the table. The points are fixed before the runs (plan.json).
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The (kind, start, share) each model runs under, in turn.
ROTATION = [("hogwild", "fork", "yes"), ("hogwild", "spawn", "no"),
            ("hogwild", "forkserver", "yes"), ("data_parallel", "spawn", "no"),
            ("hogwild", "fork", "no"), ("hogwild", "spawn", "yes"),
            ("hogwild", "forkserver", "no"), ("data_parallel", "fork", "no"),
            ("data_parallel", "forkserver", "no")]

# Builders' arguments where the defaults do not fit a 64x64 image or a plain-logits loss.
SPECIAL = {
    # ViTs take their image size at construction (a multiple of the patch).
    "vit_b_16": ({"image_size": 64}, 64), "vit_b_32": ({"image_size": 64}, 64),
    "vit_l_16": ({"image_size": 64}, 64), "vit_l_32": ({"image_size": 64}, 64),
    "vit_h_14": ({"image_size": 56}, 56),
    # MaxViT's partitions (7x7) need 224x224.
    "maxvit_t": ({}, 224),
    # Scripted, both return a NamedTuple (Shoal's output is its first element, the logits);
    # without auxiliary heads, as one trains them with one loss. Inception needs 75x75 or more.
    "googlenet": ({"aux_logits": False, "init_weights": True}, 64),
    "inception_v3": ({"aux_logits": False, "init_weights": True}, 96),
}

SCRIPT = r"""
import json, sys, torch, torchvision
name, kwargs, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
m = getattr(torchvision.models, name)(num_classes=10, **kwargs)
params, buffers = list(m.parameters()), list(m.buffers())
info = {"parameters": sum(p.numel() for p in params), "parameter_tensors": len(params),
        "buffer_tensors": len(buffers), "max_rank": max(p.dim() for p in params)}
try:
    torch.jit.script(m).save(path)
    info["scripted"] = True
except Exception as e:
    info["scripted"] = False
    info["error"] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
print(json.dumps(info))
"""


def names():
    import torchvision
    return torchvision.models.list_models(module=torchvision.models)


def script(name, kwargs, path):
    t0 = time.time()
    done = subprocess.run(["/usr/bin/python3", "-W", "ignore", "-c", SCRIPT, name,
                           json.dumps(kwargs), path], capture_output=True, text=True)
    if done.returncode != 0:
        return {"scripted": False, "error": done.stderr.strip().splitlines()[-1][:300]
                if done.stderr.strip() else f"exit {done.returncode}"}
    info = json.loads(done.stdout.strip().splitlines()[-1])
    info["script_s"] = round(time.time() - t0, 1)
    return info


def train(cli, path, point, image, args):
    cmd = cli + ["submit", "--model-file", path, "--input", f"float32[B,3,{image},{image}]",
                 "--classes", "10", "--kind", point["kind"], "--start", point["start"],
                 "--share", point["share"], "--workers", str(args.workers), "--threads", "1",
                 "--batch-size", str(args.batch_size), "--batches", str(args.batches),
                 "--lr", "0.001", "--wait", "--json"]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    out = {"train_s": round(time.time() - t0, 1)}
    try:
        e = json.loads(done.stdout)
    except ValueError:
        out["error"] = (done.stderr or done.stdout).strip()[:400]
        return out
    r = e.get("result", {})
    out.update({"state": e.get("state"), "error": e.get("error", "")[:400],
                "samples_per_sec": r.get("samples_per_sec"),
                "first_loss": r.get("first_loss"), "last_loss": r.get("last_loss"),
                "peak_pss_sum_bytes": r.get("peak_pss_sum_bytes"),
                "weights_bytes": r.get("weights_bytes"),
                "model_step_bytes": r.get("model_step_bytes"),
                "leader_program": r.get("leader_program"),
                "replicas_identical": (r.get("data_parallel") or {}).get("replicas_identical")})
    return out


def summary(out_dir, rows):
    ok = sum(1 for r in rows if r.get("state") == "SUCCEEDED")
    scripted = sum(1 for r in rows if r.get("scripted"))
    lines = [f"# Every torchvision classification model through --model-file ({len(rows)} listed)",
             "", f"{scripted} scripted; {ok} of them trained (SUCCEEDED).", "",
             "| model | params (M) | tensors p/b | image | kind | start | share | outcome |"
             " samples/s | peak PSS sum (MiB) | weights (MiB) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if not r.get("scripted"):
            outcome = "does not script: " + r.get("error", "")[:120].replace("|", "/")
        elif r.get("state") == "SUCCEEDED":
            outcome = "trained" + (", replicas identical" if r.get("replicas_identical") else "")
        else:
            outcome = (r.get("state") or "no record") + ": " + \
                (r.get("error") or "")[:160].replace("|", "/").replace("\n", " ")
        def mib(k):
            return f"{r[k] / 2**20:.0f}" if r.get(k) else "-"
        sps = f"{r['samples_per_sec']:.1f}" if r.get("samples_per_sec") else "-"
        params = f"{r['parameters'] / 1e6:.1f}" if r.get("parameters") else "-"
        tensors = f"{r.get('parameter_tensors', '-')}/{r.get('buffer_tensors', '-')}"
        lines.append(f"| {r['model']} | {params} | {tensors} | {r['image']} | {r['kind']} |"
                     f" {r['start']} | {r['share']} | {outcome} | {sps} |"
                     f" {mib('peak_pss_sum_bytes')} | {mib('weights_bytes')} |")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "zoo-every-model"))
    ap.add_argument("--only", default="")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows of raw.jsonl that trained or did not script; run the rest "
                         "(the rows replaced go to raw-replaced.jsonl)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    points = []
    for i, name in enumerate(names()):  # the rotation by the full list: --only keeps each's
        if args.only and name not in args.only.split(","):
            continue
        kind, start, share = ROTATION[i % len(ROTATION)]
        kwargs, image = SPECIAL.get(name, ({}, 64))
        points.append({"model": name, "kwargs": kwargs, "image": image, "kind": kind,
                       "start": start, "share": share})
    kept = {}
    raw_path = os.path.join(args.out, "raw.jsonl")
    if args.resume and os.path.exists(raw_path):
        with open(raw_path) as f, open(os.path.join(args.out, "raw-replaced.jsonl"), "a") as out:
            for line in f:
                row = json.loads(line)
                if row.get("state") == "SUCCEEDED" or not row.get("scripted"):
                    kept[row["model"]] = row
                else:
                    out.write(line)
    else:
        with open(os.path.join(args.out, "plan.json"), "w") as f:
            json.dump({"args": vars(args), "points": points}, f, indent=1)
    work = tempfile.mkdtemp(prefix="shoal-every-")
    sock = os.path.join(work, "s.sock")
    # Uploads up to 4 GiB: regnet_y_128gf and vit_h_14 are 2.4-2.5 GiB files.
    daemon = subprocess.Popen([os.path.join(args.bin, "shoald"), "--socket", sock, "--state-dir",
                               os.path.join(work, "state"), "--log-level", "warn",
                               "--max-upload-mb", "4096"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = [os.path.join(args.bin, "shoal"), "--socket", sock]
    rows = []
    try:
        for _ in range(100):
            if subprocess.run(cli + ["list"], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        raw = open(raw_path, "w")
        for p in points:
            if p["model"] in kept:
                raw.write(json.dumps(kept[p["model"]]) + "\n")
                rows.append(kept[p["model"]])
                continue
            path = os.path.join(work, p["model"] + ".pt")
            row = dict(p)
            row.update(script(p["model"], p["kwargs"], path))
            if row.get("scripted"):
                row.update(train(cli, path, p, p["image"], args))
                os.remove(path)
            print(f"{p['model']}: {row.get('state', 'not scripted')} {row.get('error', '')[:200]}",
                  file=sys.stderr, flush=True)
            raw.write(json.dumps(row) + "\n")
            raw.flush()
            rows.append(row)
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(work, ignore_errors=True)
    summary(args.out, rows)


if __name__ == "__main__":
    main()
