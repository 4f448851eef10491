#!/usr/bin/env python3
"""torchvision's DataLoader against stoker.ImageLoader: throughput and fidelity.

Both loaders read the same ImageFolder, in one process run, with the same
transforms, batch size and degree of parallelism, and produce normalised
float32 NCHW batches:

  train: RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)
  eval:  Resize(256), CenterCrop(224), ToTensor(), Normalize(mean, std)

  torchvision: DataLoader(ImageFolder(root, transform), batch_size, shuffle=<train>,
               num_workers=N, persistent_workers=True[, pin_memory=True on CUDA])
  stoker:      stoker.ImageLoader(root, batch_size, pipeline=..., threads=N, device=...)

Rounds alternate between the loaders (so drift in machine load hits both) and
the best round of each is kept. A round builds a fresh loader and times it from
its construction (the folder scan and the start of workers or threads included)
to the last batch of its last epoch. On --device cuda, torchvision's batches are
copied from pinned memory with .to(device, non_blocking=True), stoker's arrive
on the device, and each timed epoch ends with torch.cuda.synchronize(), so the
time runs until every batch is usable on the device.

Fidelity: the eval pipeline's first K images from both loaders, un-normalised
to 0..255 and rounded (the uint8 values they stand for), compared per image by
PSNR; a mean below 35 dB is flagged.

A flat folder of images (no class sub-folders) is accepted: each file becomes a
class of its own, in an ImageFolder of symbolic links under data/bench/,
replicated --copies times (bench/cpu_vs_torchvision.py's make_folder).

usage: bench/compare.py SRC [--workers 2] [--batch-size 256] [--epochs 2] [--rounds 3]
                            [--pipeline train eval] [--device cpu|cuda] [--json]
"""
import argparse
import gc
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpu_vs_torchvision import make_folder, warm_cache  # noqa: E402

import torch  # noqa: E402
import torchvision.transforms as T  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

try:
    import stoker
except ImportError:  # not installed: the module `make` builds in the repository
    sys.path.insert(0, os.path.join(REPO, "python"))
    import stoker

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZE = 224
PSNR_FLAG_DB = 35.0


def transform(pipeline):
    if pipeline == "train":
        head = [T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip()]
    else:
        head = [T.Resize(SIZE * 256 // 224), T.CenterCrop(SIZE)]
    return T.Compose(head + [T.ToTensor(), T.Normalize(MEAN, STD)])


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_torchvision(root, pipeline, a, device, seed):
    """One timed round: {images, seconds, images_per_s, epoch_seconds}."""
    cuda = device.type == "cuda"
    gen = torch.Generator()
    gen.manual_seed(seed)
    t0 = time.perf_counter()
    ds = ImageFolder(root, transform(pipeline))
    dl = DataLoader(ds, batch_size=a.batch_size, shuffle=pipeline == "train", generator=gen,
                    num_workers=a.workers, pin_memory=cuda, persistent_workers=True)
    images, marks = 0, []
    for _ in range(a.epochs):
        for x, y in dl:
            if cuda:
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
            images += x.shape[0]
        sync(device)
        marks.append(time.perf_counter())
    del dl  # shuts the persistent workers down before the other loader runs
    gc.collect()
    return result(images, t0, marks)


def run_stoker(root, pipeline, a, device, seed):
    """One timed round, as run_torchvision."""
    t0 = time.perf_counter()
    loader = stoker.ImageLoader(root, a.batch_size, pipeline=pipeline, threads=a.workers,
                                device=device, seed=seed)
    images, marks = 0, []
    for _ in range(a.epochs):  # each completed pass moves on to the next epoch
        for x, y in loader:
            images += x.shape[0]
        sync(device)
        marks.append(time.perf_counter())
    loader.close()  # its threads would otherwise prepare the next epoch meanwhile
    return result(images, t0, marks)


def result(images, t0, marks):
    secs = marks[-1] - t0
    return {"images": images, "seconds": round(secs, 4), "images_per_s": round(images / secs, 2),
            "epoch_seconds": [round(b - a, 4) for a, b in zip([t0] + marks, marks)]}


def to_uint8_values(x):
    """Normalised [3, H, W] images back to the 0..255 values they came from."""
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (x.float().cpu() * std + mean).mul(255).round().clamp(0, 255)


def fidelity(root, k, a, device):
    """PSNR of stoker's eval images against torchvision's, over the first k images."""
    ds = ImageFolder(root, transform("eval"))
    k = min(k, len(ds))
    loader = stoker.ImageLoader(root, min(k, a.batch_size), pipeline="eval", shuffle=False,
                                threads=a.workers, device=device)
    # Both must list the same files in the same order, with the same labels.
    mine = [(os.path.normpath(p), c) for p, c in loader.samples[:k]]
    theirs = [(os.path.normpath(p), c) for p, c in ds.samples[:k]]
    if mine != theirs:
        raise SystemExit("stoker and ImageFolder list different samples: cannot compare")
    psnrs, identical, max_diff = [], 0, 0.0
    for b in loader.iter_batches():
        for j, idx in enumerate(b.indices):
            if idx >= k:
                break
            s = to_uint8_values(b.images[j])
            t = to_uint8_values(ds[idx][0])
            if torch.equal(s, t):  # PSNR is infinite: nothing to compute
                identical += 1
                continue
            diff = s - t
            max_diff = max(max_diff, diff.abs().max().item())
            psnrs.append(10 * math.log10(255.0 ** 2 / diff.pow(2).mean().item()))
        if b.indices[-1] >= k - 1:
            break
    loader.close()
    out = {"images": identical + len(psnrs), "identical": identical,
           "max_abs_diff": max_diff}
    if psnrs:
        out["mean_psnr_db"] = round(sum(psnrs) / len(psnrs), 2)  # over the differing images
        out["min_psnr_db"] = round(min(psnrs), 2)
        out["below_threshold"] = out["mean_psnr_db"] < PSNR_FLAG_DB
    else:
        out.update(mean_psnr_db="inf", min_psnr_db="inf", below_threshold=False)
    return out


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="image folder (flat, or ImageFolder layout)")
    ap.add_argument("--workers", type=int, default=cpu_count(),
                    help="torchvision num_workers and stoker threads (default: the CPUs)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per timed round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each loader")
    ap.add_argument("--pipeline", nargs="+", choices=["train", "eval"], default=["train"])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--copies", type=int, default=4,
                    help="links per image in the folder that is timed")
    ap.add_argument("--fidelity-images", type=int, default=100, metavar="K",
                    help="images compared for fidelity (0: skip)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=os.path.join(REPO, "data", "bench"),
                    help="where the linked ImageFolder views are made")
    ap.add_argument("--json", action="store_true", help="print a final JSON line")
    a = ap.parse_args()
    if a.workers < 1:
        ap.error("--workers must be >= 1 (stoker needs a thread)")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available")
    device = (torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda"
              else torch.device("cpu"))
    torch.set_num_threads(1)  # the consuming process only counts batches

    root = make_folder(a.src, a.copies, a.work)
    nbytes = warm_cache(root)
    n = len(ImageFolder(root).samples)
    print(f"dataset: {root} ({n} images, {nbytes / 1e6:.1f} MB), device {device}, "
          f"{a.workers} workers/threads, batch {a.batch_size}, {a.epochs} epochs per round, "
          f"{cpu_count()} CPUs", flush=True)

    results = {}
    for pipeline in a.pipeline:
        tv, st = [], []
        for r in range(a.rounds):
            seed = a.seed + r
            tv.append(run_torchvision(root, pipeline, a, device, seed))
            st.append(run_stoker(root, pipeline, a, device, seed))
            print(f"{pipeline} round {r}: torchvision {tv[-1]['images_per_s']:.1f} img/s, "
                  f"stoker {st[-1]['images_per_s']:.1f} img/s", flush=True)
        best_tv = max(x["images_per_s"] for x in tv)
        best_st = max(x["images_per_s"] for x in st)
        results[pipeline] = {"torchvision": tv, "stoker": st, "best_torchvision": best_tv,
                             "best_stoker": best_st, "ratio": round(best_st / best_tv, 3)}

    fid = None
    if a.fidelity_images > 0:
        # One link per image, so that the first K images are K different files.
        fid_root = make_folder(a.src, 1, a.work)
        fid = fidelity(fid_root, a.fidelity_images, a, device)

    print()
    print(f"| loader | pipeline | images/s (best of {a.rounds}) | ratio |")
    print("|---|---|---|---|")
    for pipeline, res in results.items():
        print(f"| torchvision DataLoader, {a.workers} workers | {pipeline} | "
              f"{res['best_torchvision']:.1f} | 1.00x |")
        print(f"| stoker.ImageLoader, {a.workers} threads | {pipeline} | "
              f"{res['best_stoker']:.1f} | {res['ratio']:.2f}x |")
    if fid is not None:
        print()
        head = f"fidelity (eval, first {fid['images']} images, stoker on {device.type}): "
        if fid["mean_psnr_db"] == "inf":
            print(head + "identical to torchvision (PSNR inf)")
        else:
            flag = f"  ** BELOW {PSNR_FLAG_DB:.0f} dB **" if fid["below_threshold"] else ""
            print(head + f"mean PSNR {fid['mean_psnr_db']:.2f} dB over the "
                  f"{fid['images'] - fid['identical']} differing images (min "
                  f"{fid['min_psnr_db']:.2f} dB, largest difference "
                  f"{fid['max_abs_diff']:.0f}/255), {fid['identical']} identical{flag}")
    if a.json:
        print(json.dumps({"dataset": root, "images": n, "device": device.type,
                          "workers": a.workers, "batch_size": a.batch_size,
                          "epochs": a.epochs, "rounds": a.rounds, "results": results,
                          "fidelity": fid}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
