#!/usr/bin/env python3
"""Train-pipeline throughput on the CPU: torchvision's DataLoader against `stoker bench` and `stoker.ImageLoader`.

Both read the same ImageFolder, side by side in one run, with the same number of
worker threads/processes, and produce normalised float32 224x224 NCHW batches:

  torchvision: DataLoader(ImageFolder(root, Compose([RandomResizedCrop(224),
               RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)])),
               batch_size, shuffle=True, num_workers=threads, persistent_workers=True)
  stoker:      stoker bench root --pipeline train --threads N --batch B --json
  ImageLoader: stoker.ImageLoader(root, B, pipeline="train", threads=N), a plain loop

A flat folder of images (one class per file) is turned into an ImageFolder of
symbolic links first, replicated --copies times. Prints a table and the ratio.

usage: bench/cpu_vs_torchvision.py SRC [--threads 2] [--copies 4] [--epochs 2]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def make_folder(src, copies, work):
    """ImageFolder view of src: src itself if it has class folders, else links."""
    entries = sorted(os.listdir(src))
    if any(os.path.isdir(os.path.join(src, e)) for e in entries) and copies == 1:
        return src
    root = os.path.join(work, os.path.basename(os.path.normpath(src)) + f"-x{copies}")
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker):
        return root
    os.makedirs(root, exist_ok=True)
    files = []
    for e in entries:
        p = os.path.join(src, e)
        if os.path.isdir(p):
            files += [(e, os.path.join(p, f)) for f in sorted(os.listdir(p))]
        else:
            files.append((os.path.splitext(e)[0], p))
    for cls, path in files:
        d = os.path.join(root, cls)
        os.makedirs(d, exist_ok=True)
        base, ext = os.path.splitext(os.path.basename(path))
        for k in range(copies):
            dst = os.path.join(d, f"{base}_{k}{ext}")
            if not os.path.exists(dst):
                os.symlink(os.path.abspath(path), dst)
    open(marker, "w").close()
    return root


def warm_cache(root):
    n = 0
    for d, _, fs in os.walk(root, followlinks=True):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                n += len(fh.read())
    return n


def run_torchvision(root, threads, batch, epochs):
    import torch
    import torchvision.datasets as datasets
    import torchvision.transforms as T

    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(root, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads,
                                     persistent_workers=threads > 0)
    return _time_epochs(dl, epochs)


def _time_epochs(loader, epochs):
    """Images/s of `epochs` passes over a loader that yields (images, labels)."""
    images = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for x, y in loader:
            images += x.shape[0]
    secs = time.perf_counter() - t0
    return {"images": images, "seconds": secs, "images_per_s": images / secs}


def run_stoker(root, threads, batch, epochs, exe):
    cmd = [exe, "bench", root, "--pipeline", "train", "--threads", str(threads), "--batch",
           str(batch), "--epochs", str(epochs), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_imageloader(root, threads, batch, epochs):
    sys.path.insert(0, os.path.join(REPO, "python"))
    import stoker

    ld = stoker.ImageLoader(root, batch, pipeline="train", threads=threads)
    r = _time_epochs(ld, epochs)
    ld.close()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="image folder (flat, or ImageFolder layout)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of each loader")
    ap.add_argument("--stoker", default=os.path.join(REPO, "build", "stoker"))
    ap.add_argument("--work", default=os.path.join(REPO, "data", "bench"))
    ap.add_argument("--json", help="write the results to this file")
    a = ap.parse_args()

    root = make_folder(a.src, a.copies, a.work)
    nbytes = warm_cache(root)
    print(f"dataset: {root} ({nbytes / 1e6:.1f} MB), {a.threads} threads/workers, batch {a.batch}, "
          f"{a.epochs} epochs per run, {os.cpu_count()} CPUs", flush=True)
    tv, st, il = [], [], []
    for r in range(a.rounds):  # alternate, so drift in machine load hits all three
        tv.append(run_torchvision(root, a.threads, a.batch, a.epochs))
        st.append(run_stoker(root, a.threads, a.batch, a.epochs, a.stoker))
        il.append(run_imageloader(root, a.threads, a.batch, a.epochs))
        print(f"round {r}: torchvision {tv[-1]['images_per_s']:.1f} img/s, "
              f"stoker bench {st[-1]['images_per_s']:.1f} img/s, "
              f"ImageLoader {il[-1]['images_per_s']:.1f} img/s", flush=True)
    best_tv = max(x["images_per_s"] for x in tv)
    best_st = max(x["images_per_s"] for x in st)
    best_il = max(x["images_per_s"] for x in il)
    ratio = best_st / best_tv
    print()
    print(f"| loader | images/s (best of {a.rounds}) |")
    print("|---|---|")
    print(f"| torchvision DataLoader, {a.threads} workers | {best_tv:.1f} |")
    print(f"| stoker bench, {a.threads} threads | {best_st:.1f} ({ratio:.2f}x) |")
    print(f"| stoker.ImageLoader, {a.threads} threads | {best_il:.1f} ({best_il / best_tv:.2f}x) |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torchvision": tv, "stoker": st, "imageloader": il, "ratio": ratio,
                       "ratio_imageloader": best_il / best_tv}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
