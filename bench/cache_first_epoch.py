#!/usr/bin/env python3
"""What ImageLoader(root, cache=PATH) costs on first use, against what it
replaces: `stoker.pack(root, PATH)` then one epoch from the cache, side by
side in one run, alternating, with the page cache written back between
runs (a pack's dirty pages would otherwise slow the next one's sync).

usage: bench/cache_first_epoch.py SRC [--copies 4] [--reps 2] [--threads 2]
                                  [--device cpu|cuda[:N]] [--batch 64] [--out DIR]

SRC is a flat folder of images, linked COPIES times into an ImageFolder under
data/cache-first (one class per copy). Prints one line per repetition and the
ratio first-use / (pack + cache epoch).
"""
import argparse
import os
import time

import torch  # imported before timing: the loader would import it on first use

import stoker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dataset(src, copies):
    d = os.path.join(ROOT, "data", "cache-first", "src")
    files = sorted(f for f in os.listdir(src) if not f.startswith("."))
    for c in range(copies):
        cd = os.path.join(d, f"c{c:03d}")
        os.makedirs(cd, exist_ok=True)
        for f in files:
            link = os.path.join(cd, f)
            if not os.path.lexists(link):
                os.symlink(os.path.realpath(os.path.join(src, f)), link)
    return d, copies * len(files)


def epoch(ld):
    t = time.perf_counter()
    n = sum(len(y) for _, y in ld)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "cache-first"),
                    help="where the caches go (a tmpfs: without the disk's write-back)")
    a = ap.parse_args()
    folder, n = dataset(a.src, a.copies)
    out = a.out
    os.makedirs(out, exist_ok=True)
    first_use, by_hand = os.path.join(out, "first-use.stkc"), os.path.join(out, "by-hand.stkc")
    kw = dict(batch_size=a.batch, threads=a.threads, device=a.device)
    pack_device = None if a.device == "cpu" else a.device
    print(f"{n} files, {a.threads} threads, device {a.device}")

    def clean():
        for f in (first_use, by_hand):
            if os.path.exists(f):
                os.unlink(f)
        os.sync()

    def with_cache():
        clean()
        t = time.perf_counter()
        with stoker.ImageLoader(folder, cache=first_use, **kw) as ld:
            built = time.perf_counter() - t
            return built, *epoch(ld)

    def by_hand_pack():
        clean()
        t = time.perf_counter()
        stoker.pack(folder, by_hand, threads=a.threads, device=pack_device)
        tp = time.perf_counter() - t
        with stoker.ImageLoader(by_hand, **kw) as ld:
            return tp, *epoch(ld)

    for rep in range(a.reps):
        # each first in turn: what ran just before slows a run down
        if rep % 2 == 0:
            built, e1, n1 = with_cache()
            tp, e2, n2 = by_hand_pack()
        else:
            tp, e2, n2 = by_hand_pack()
            built, e1, n1 = with_cache()
        assert n1 == n2 == n, (n1, n2, n)
        first = built + e1
        print(f"rep {rep} ({'cache= first' if rep % 2 == 0 else 'pack first'}): cache= first epoch {first:.2f} s (loader built, pack included, "
              f"{built:.2f}; epoch {e1:.2f}); pack {tp:.2f} s + cache epoch {e2:.2f} s = "
              f"{tp + e2:.2f} s; ratio {first / (tp + e2):.3f}", flush=True)
    clean()


if __name__ == "__main__":
    main()
